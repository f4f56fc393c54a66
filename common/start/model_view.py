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
sees the repaired values, a nested `text_config`'s included) before it is used; a failure drops
the repairs with a finding.
Files only a view can carry (R6: the legacy processor files, since vLLM loads the processor from
the model path and no flag points elsewhere) make the route a view whatever the config edits
are. So does a tokenizer overlay of a model that has a processor, whichever rule repaired the
tokenizer and whatever form the processor files are in: the processor loads its tokenizer from
the model path, past `--tokenizer`. Such a view holds the tokenizer overlay's rewritten files,
carries those repairs too, and is verified by loading the processor from it.
"""

from __future__ import annotations

import json
import os

from ..model.headsize import NESTED_TEXT_CONFIGS
from ..model.processor_files import processor_check
from .log import say
from .overlay import build_overlay, patch_json

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    from ..engine.profile import Profile
    from ..engine.vllm_args import UserArgs
    from ..model.modeldir import ModelDir
    from ..plan import Plan, Repair

CONFIG = "config.json"
VIEW_DIR = "model"
CONFIG_DIR = "config"
ROUTE_HF_OVERRIDES = "hf-overrides"
ROUTE_CONFIG_PATH = "hf-config-path"
ROUTE_VIEW = "model view"


def _top_level(key: str, value: Any) -> bool:
    """Whether --hf-overrides can set this key: a plain attribute, not a nested sub-config."""
    return not (isinstance(value, dict) and key.endswith("_config"))


def choose_route(edits: Dict[str, Any], profile: Profile, user: UserArgs, view_only: bool = False) -> str:
    """How the edits reach the engine; `view_only`: some repair has files only a view carries."""
    if view_only:
        return ROUTE_VIEW
    if profile.accepts("hf_overrides") and all(_top_level(k, v) for k, v in edits.items()):
        return ROUTE_HF_OVERRIDES
    if profile.accepts("hf_config_path") and not user.has("--hf-config-path"):
        return ROUTE_CONFIG_PATH
    return ROUTE_VIEW


def merge_edits(repairs: List[Repair]) -> Dict[str, Any]:
    """The config edits of several repairs as one: a nested sub-config two repairs give whole
    (R5's text_config rope, H2's text_config head_dim) keeps the keys of both."""
    edits: Dict[str, Any] = {}
    for repair in repairs:
        for key, value in repair.config_edits.items():
            if isinstance(value, dict) and not _top_level(key, value) and isinstance(edits.get(key), dict):
                edits[key] = dict(edits[key], **value)
            else:
                edits[key] = value
    return edits


class Carried:
    """What carrying the edits produced: the directory to verify (None: nothing to verify, e.g.
    --hf-overrides) and the repairs it carries."""

    __slots__ = ("route", "config_dir", "repairs", "edits", "changed", "files", "written", "processor")

    def __init__(
        self,
        route: str,
        config_dir: Optional[str],
        repairs: List[Repair],
        edits: Dict[str, Any],
        original: Optional[Dict[str, Any]] = None,
        files: Optional[Dict[str, Dict[str, Any]]] = None,
    ) -> None:
        self.route, self.config_dir, self.repairs, self.edits = route, config_dir, repairs, edits
        self.changed = changed_names(edits, original or {})
        self.files = dict(files or {})
        self.written: List[str] = []  # the names of the view that are new files, not links
        # The processor check of the view (engine_checks/process.py), when it holds processor or
        # tokenizer files the processor reads.
        self.processor: Optional[Dict[str, Any]] = None

    def requests(self, trust_remote_code: bool) -> List[Dict[str, Any]]:
        """The engine-side checks, in the order apply_verdict takes their answers: AutoConfig reads
        the rewritten config with the repaired values; the processor loads from the view."""
        out: List[Dict[str, Any]] = []
        if self.edits:
            out.append({"kind": "config", "path": self.config_dir, "trust_remote_code": trust_remote_code, "attributes": self.changed})
        if self.processor is not None:
            out.append(dict(self.processor, kind="processor", path=self.config_dir, trust_remote_code=trust_remote_code))
        return out

    def request(self, trust_remote_code: bool) -> Dict[str, Any]:
        """The config check alone (the form before view files existed)."""
        return self.requests(trust_remote_code)[0]


def changed_names(edits: Dict[str, Any], original: Dict[str, Any]) -> List[str]:
    """The attribute names to ask the engine about: each top-level edit, and inside a nested
    sub-config given whole, the keys it changes (the engine reads them on its text config)."""
    names = set()
    for key, value in edits.items():
        if key in NESTED_TEXT_CONFIGS and isinstance(value, dict):
            before = original.get(key) if isinstance(original.get(key), dict) else {}
            names.update(k for k, v in value.items() if k not in before or before[k] != v)
        else:
            names.add(key)
    return sorted(names)


def carry(
    plan: Plan,
    model: ModelDir,
    profile: Profile,
    user: UserArgs,
    tokenizer_edits: Optional[Dict[str, List[Dict[str, Any]]]] = None,
    tokenizer_repairs: Optional[List[Repair]] = None,
) -> Optional[Carried]:
    """Route the config edits and view files of the plan's repairs; write what the route needs
    into the work dir. `tokenizer_edits`: the tokenizer overlay's, made by `tokenizer_repairs`;
    a model with a processor gets them in a view too. Returns None when no repair edits
    config.json or needs a view."""
    processor = processor_check(model) if tokenizer_edits else None
    # The processor loads its tokenizer from the model path: the overlay's repairs ride the view.
    riders = [r for r in tokenizer_repairs or [] if r.verified is not False] if processor is not None else []
    own = [r for r in plan.repairs if (r.config_edits or r.view_files) and r.verified is not False]
    repairs = [r for r in plan.repairs if r in own or r in riders]
    if not repairs:
        return None
    edits = merge_edits(own)
    files: Dict[str, Dict[str, Any]] = {}
    for repair in own:
        files.update(repair.view_files)
    checks = [r.processor_check for r in own if r.processor_check is not None]
    processor = checks[0] if checks else processor
    view_only = bool(files or checks or riders)
    route = choose_route(edits, profile, user, view_only)
    codes = "+".join(r.code for r in repairs)
    original = model.json_object(CONFIG)
    if route == ROUTE_HF_OVERRIDES:
        for repair in repairs:
            repair.hf_overrides.update(repair.config_edits)
        return Carried(route, None, repairs, edits, original)
    if edits and user.has("--hf-config-path"):
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
            _link_generation_config(model, target)
            repairs[0].args = ["--hf-config-path", target] + repairs[0].args
        else:
            target = os.path.join(plan.work_dir, VIEW_DIR)
            rewritten: Dict[str, List[Dict[str, Any]]] = dict(tokenizer_edits or {}) if view_only else {}
            if edits:
                rewritten[CONFIG] = [edits]
            build_overlay(model, target, rewritten, keep=lambda name: name not in files)
            for name, content in sorted(files.items()):
                _write_json(os.path.join(target, name), content)
    except (OSError, ValueError) as exc:  # a full disk, or text the file system cannot hold
        _drop(plan, repairs, f"the model view could not be written ({getattr(exc, 'strerror', None) or exc})")
        return None
    carried = Carried(route, target, repairs, edits, original, files)
    carried.processor = processor if view_only else None
    carried.written = sorted(set(([CONFIG] if edits else []) + list(files) + (list(tokenizer_edits or {}) if view_only else [])))
    say(f"{codes}: {', '.join(carried.written)} written and carried by {route}: {target}")
    return carried


def apply_verdict(
    plan: Plan,
    carried: Carried,
    ok: Optional[bool],
    reason: str,
    answer: Dict[str, Any],
    user: UserArgs,
    model_arg: str,
    more: Optional[List[Any]] = None,
) -> None:
    """Keep the carried repairs when the engine's transformers reads the rewritten config with
    the repaired values (and loads the processor from the view: `more`, the (ok, reason, answer)
    of the further requests of carried.requests()); serve the view when that is the route.
    The repairs of one view are verified together, like those of one tokenizer overlay."""
    if ok and carried.edits:
        mismatch = edits_mismatch(carried.edits, answer.get("attributes") or {}, answer.get("text_config"))
        if mismatch:
            ok, reason = False, mismatch
    for more_ok, more_reason, _ in more or []:
        if ok and not more_ok:
            ok, reason = more_ok, more_reason
        elif ok:
            reason = f"{reason}; {more_reason}" if reason else more_reason
    # The tokenizer overlay's repairs were checked first: a view holding files that did not load
    # (or could not be checked) is not served either.
    unsure = [r for r in carried.repairs if r.overlay and r.verified is not True]
    if ok and unsure:
        ok, reason = unsure[0].verified, f"its tokenizer files did not verify ({unsure[0].verification})"
    codes = "+".join(r.code for r in carried.repairs)
    for repair in carried.repairs:
        # A rider keeps what its own check said, and adds the view's verdict.
        before = repair.verification if repair.verified and repair.verification else ""
        repair.verified, repair.verification = ok, f"{before}; the view: {reason}" if before else reason
    if not ok:
        state = "failed" if ok is False else "unavailable"
        what = "the model view" if carried.processor is not None else "the rewritten config.json"
        message = f"{codes} dropped: {what}: verification {state}: {reason}"
        plan.add_finding(carried.repairs[0].code, "error" if ok is False else "warning", message)
        say(message)
        return
    say(f"{codes} verified: {reason}")
    if carried.route == ROUTE_VIEW:
        plan.model_path = carried.config_dir or plan.model_path
        plan.view = {
            "path": plan.model_path,
            "rewritten": carried.written,
            "codes": [r.code for r in carried.repairs],
            "why": (
                "this engine loads the processor, and the processor its tokenizer, from the model path and has no flag "
                f"for another ({', '.join(n for n in carried.written if n != CONFIG) or 'its files'})"
                if carried.processor is not None
                else f"this engine has no flag that carries the repaired config.json values ({', '.join(sorted(carried.edits))})"
            ),
        }
        if not user.has("--served-model-name"):
            carried.repairs[0].args = ["--served-model-name", model_arg] + carried.repairs[0].args
        say(f"serving the model view {plan.model_path} as {model_arg!r}")


def _write_config(model: ModelDir, path: str, edits: Dict[str, Any]) -> None:
    _write_json(path, patch_json(model.json_object(CONFIG), [edits]))


def _write_json(path: str, content: Dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(content, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


def _link_generation_config(model: ModelDir, target: str) -> None:
    """vLLM reads generation_config.json from --hf-config-path's directory too (its default
    sampling settings): without the model's own there, it would make one from config.json."""
    name = "generation_config.json"
    if model.has(name):
        os.symlink(os.path.join(model.path, name), os.path.join(target, name))


def edits_mismatch(edits: Dict[str, Any], seen: Dict[str, Any], text: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """Why the engine's reading of the rewritten config differs from the edits, or None. Only
    plain values are compared (a dict is the engine's to expand); a nested text config's values
    are compared with what the engine reads on its text config (`text`, the check's answer)."""
    for key, want in sorted(edits.items()):
        if key in NESTED_TEXT_CONFIGS and isinstance(want, dict):
            inner = (text or {}).get("attributes") or {}
            for name, value in sorted(want.items()):
                why = _differs(f"{key}.{name}", value, inner)
                if why:
                    return why
            continue
        why = _differs(key, want, seen)
        if why:
            return why
    return None


def _differs(label: str, want: Any, seen: Dict[str, Any]) -> Optional[str]:
    key = label.rsplit(".", 1)[-1]
    if isinstance(want, dict) or key not in seen:
        return None
    got = seen[key]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        same = abs(got - want) <= 1e-9 * max(1.0, abs(want))
    else:
        same = json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    return None if same else f"the engine's transformers reads {label}={got!r}, not {want!r}"


def _drop(plan: Plan, repairs: List[Repair], reason: str) -> None:
    codes = "+".join(r.code for r in repairs)
    for repair in repairs:
        repair.verified, repair.verification = False, reason
    plan.add_finding(repairs[0].code, "error", f"{codes} dropped: {reason}")
    say(f"{codes} dropped: {reason}")
