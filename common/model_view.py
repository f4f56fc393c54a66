"""How a repaired config.json reaches the engine: a flag where the engine has one, else a view.

Repairs state config.json changes as `config_edits` (top-level keys; a nested sub-config given
whole). In order of preference (DESIGN.md, "How a repair reaches the engine"):
1. `--hf-overrides` (vLLM >= 0.6): top-level values only. vLLM applies it with setattr on the
   loaded config, so a nested `text_config` cannot be carried this way.
2. `--hf-config-path DIR`: DIR holds the rewritten config.json; the model path stays.
3. A model view: a work-dir directory with a symlink to every entry of the model (weights are
   linked, never opened or copied) and the rewritten config.json, served in place of the model
   with `--served-model-name` set to the name vLLM would have given the original (the path the
   platform passed) unless the arguments set one. vLLM 0.5.5 (BI-100) has neither flag.
The rewritten config is verified with the engine's own transformers (AutoConfig reads it and
sees the repaired values) before it is used; a failure drops the repairs with a finding.
"""

from __future__ import annotations

import json
import os

from .log import say
from .overlay import build_overlay, patch_json

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    from .modeldir import ModelDir
    from .plan import Plan, Repair
    from .profile import Profile
    from .vllm_args import UserArgs

CONFIG = "config.json"
VIEW_DIR = "model"
CONFIG_DIR = "config"
ROUTE_HF_OVERRIDES = "hf-overrides"
ROUTE_CONFIG_PATH = "hf-config-path"
ROUTE_VIEW = "model view"


def _top_level(key: str, value: Any) -> bool:
    """Whether --hf-overrides can set this key: a plain attribute, not a nested sub-config."""
    return not (isinstance(value, dict) and key.endswith("_config"))


def choose_route(edits: Dict[str, Any], profile: Profile, user: UserArgs) -> str:
    if profile.accepts("hf_overrides") and all(_top_level(k, v) for k, v in edits.items()):
        return ROUTE_HF_OVERRIDES
    if profile.accepts("hf_config_path") and not user.has("--hf-config-path"):
        return ROUTE_CONFIG_PATH
    return ROUTE_VIEW


class Carried:
    """What carrying the edits produced: the directory to verify (None: nothing to verify, e.g.
    --hf-overrides) and the repairs it carries."""

    __slots__ = ("route", "config_dir", "repairs", "edits")

    def __init__(self, route: str, config_dir: Optional[str], repairs: List[Repair], edits: Dict[str, Any]) -> None:
        self.route, self.config_dir, self.repairs, self.edits = route, config_dir, repairs, edits

    def request(self, trust_remote_code: bool) -> Dict[str, Any]:
        """The engine-side check: AutoConfig reads the rewritten config with the repaired values."""
        return {"kind": "config", "path": self.config_dir, "trust_remote_code": trust_remote_code, "attributes": sorted(self.edits)}


def carry(plan: Plan, model: ModelDir, profile: Profile, user: UserArgs) -> Optional[Carried]:
    """Route the config edits of the plan's repairs; write what the route needs into the work dir.
    Returns None when no repair edits config.json."""
    repairs = [r for r in plan.repairs if r.config_edits and r.verified is not False]
    if not repairs:
        return None
    edits: Dict[str, Any] = {}
    for repair in repairs:
        edits.update(repair.config_edits)
    route = choose_route(edits, profile, user)
    codes = "+".join(r.code for r in repairs)
    if route == ROUTE_HF_OVERRIDES:
        for repair in repairs:
            repair.hf_overrides.update(repair.config_edits)
        return Carried(route, None, repairs, edits)
    if user.has("--hf-config-path"):
        _drop(plan, repairs, "the arguments name their own --hf-config-path, which a rewritten config.json would replace")
        return None
    if not plan.work_dir:
        _drop(plan, repairs, "no writable work directory for the rewritten config.json")
        return None
    try:
        if route == ROUTE_CONFIG_PATH:
            target = os.path.join(plan.work_dir, CONFIG_DIR)
            os.makedirs(target)
            _write_config(model, os.path.join(target, CONFIG), edits)
            repairs[0].args = ["--hf-config-path", target] + repairs[0].args
        else:
            target = os.path.join(plan.work_dir, VIEW_DIR)
            build_overlay(model, target, {CONFIG: [edits]})
    except (OSError, ValueError) as exc:  # a full disk, or text the file system cannot hold
        _drop(plan, repairs, f"the rewritten config.json could not be written ({getattr(exc, 'strerror', None) or exc})")
        return None
    say(f"{codes}: config.json rewritten ({', '.join(sorted(edits))}) and carried by {route}: {target}")
    return Carried(route, target, repairs, edits)


def apply_verdict(
    plan: Plan, carried: Carried, ok: Optional[bool], reason: str, answer: Dict[str, Any], user: UserArgs, model_arg: str
) -> None:
    """Keep the carried repairs when the engine's transformers reads the rewritten config with
    the repaired values; serve the view when that is the route."""
    if ok:
        mismatch = _mismatch(carried.edits, answer.get("attributes") or {})
        if mismatch:
            ok, reason = False, mismatch
    codes = "+".join(r.code for r in carried.repairs)
    for repair in carried.repairs:
        repair.verified, repair.verification = ok, reason
    if not ok:
        state = "failed" if ok is False else "unavailable"
        message = f"{codes} dropped: the rewritten config.json: verification {state}: {reason}"
        plan.add_finding(carried.repairs[0].code, "error" if ok is False else "warning", message)
        say(message)
        return
    say(f"{codes} verified: {reason}")
    if carried.route == ROUTE_VIEW:
        plan.model_path = carried.config_dir or plan.model_path
        plan.view = {
            "path": plan.model_path,
            "rewritten": [CONFIG],
            "codes": [r.code for r in carried.repairs],
            "why": f"this engine has no flag that carries the repaired config.json values ({', '.join(sorted(carried.edits))})",
        }
        if not user.has("--served-model-name"):
            carried.repairs[0].args = ["--served-model-name", model_arg] + carried.repairs[0].args
        say(f"serving the model view {plan.model_path} as {model_arg!r}")


def _write_config(model: ModelDir, path: str, edits: Dict[str, Any]) -> None:
    patched = patch_json(model.json_object(CONFIG), [edits])
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(patched, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def _mismatch(edits: Dict[str, Any], seen: Dict[str, Any]) -> Optional[str]:
    """Why the engine's reading of the rewritten config differs from the edits, or None. Only
    plain values are compared (a dict is the engine's to expand)."""
    for key, want in sorted(edits.items()):
        if isinstance(want, dict) or key not in seen:
            continue
        got = seen[key]
        if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
            same = abs(got - want) <= 1e-9 * max(1.0, abs(want))
        else:
            same = json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
        if not same:
            return f"the engine's transformers reads {key}={got!r}, not {want!r}"
    return None


def _drop(plan: Plan, repairs: List[Repair], reason: str) -> None:
    codes = "+".join(r.code for r in repairs)
    for repair in repairs:
        repair.verified, repair.verification = False, reason
    plan.add_finding(repairs[0].code, "error", f"{codes} dropped: {reason}")
    say(f"{codes} dropped: {reason}")
