"""Decide the repairs for one model on one card: the Plan both `preflight` and `launch` use.

A plan is made in two steps around one engine-Python process: `start_plan` runs the rules,
writes what the repairs need and lists the engine-side checks; `finish_plan` takes their answers.
`build_plan` does both for one model; doctor over many models starts every plan first and asks
all their checks of one process per card.
"""

from __future__ import annotations


import json
import os

from ..model.facts import gather_facts
from .log import say
from ..model.modeldir import ModelDir
from ..plan import Plan, Repair
from ..engine.profile import load_profile
from ..rules import REGISTRY, Context
from ..engine.vllm_args import UserArgs, join_args
from .workdir import make_run_dir

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

    from .model_view import Carried
    from ..engine.profile import Profile

TOKENIZER_OVERLAY = "tokenizer"
# One answer of the engine-side checks: (ok, reason, the check's whole answer).
Answer = tuple


def build_plan(
    model_dir: str,
    card: str,
    user_args: Sequence[str],
    env: Mapping[str, str],
    verify: bool = True,
    plan: Optional[Plan] = None,
    patch_engine: bool = False,
    ask_engine_config: bool = False,
) -> Plan:
    """Fill `plan` (a fresh one if None) step by step, so a caller interrupted midway (timeout)
    still holds what was decided so far. Raises nothing for bad input: that becomes findings.
    `patch_engine`: apply engine source patches (launch only); otherwise they are checked against
    the engine's own file, not written. `ask_engine_config` (doctor): also ask the engine's transformers
    to read the model's config.json, which catches what the profile's tables cannot."""
    plan = plan if plan is not None else Plan(card=card, model_dir=os.path.abspath(model_dir))
    pending = start_plan(model_dir, card, user_args, env, plan, patch_engine, ask_engine_config)
    if pending is not None:
        finish_plan(pending, answer_checks(pending.requests, env, verify))
    return plan


def answer_checks(requests: List[Dict[str, Any]], env: Mapping[str, str], verify: bool = True) -> List[Answer]:
    """The engine's answers to `requests`, in order (one engine-Python process for all of them)."""
    if not requests:
        return []
    if not verify:
        return [(None, "verification skipped (--no-verify)", {})] * len(requests)
    from .verify import run_checks  # only a plan with something to check pays for it

    return [(v.ok, v.reason, v.result) for v in run_checks(requests, env)]


class Pending:
    """A plan whose repairs are decided and written, waiting for the engine-side checks
    (`requests`, answered in order by finish_plan)."""

    def __init__(self, plan: Plan, model: ModelDir, profile: Profile, user: UserArgs, env: Mapping[str, str], model_arg: str) -> None:
        self.plan, self.model, self.profile, self.user, self.env, self.model_arg = plan, model, profile, user, env, model_arg
        self.requests: List[Dict[str, Any]] = []
        self.patches: List[Repair] = []
        self.checked: List[Repair] = []  # repairs with an engine check of their own (R10's layer API)
        self.tokenizer: Optional[Tuple[str, List[Repair]]] = None
        self.carried: Optional[Carried] = None
        self.carried_requests = 0
        self.config_request = False


def start_plan(
    model_dir: str,
    card: str,
    user_args: Sequence[str],
    env: Mapping[str, str],
    plan: Plan,
    patch_engine: bool = False,
    ask_engine_config: bool = False,
) -> Optional[Pending]:
    """Everything up to the engine-side checks (build_plan's arguments); None when the plan ends
    before them (a model directory or a profile that cannot be read: the findings say why)."""
    plan.user_args = list(user_args)
    model = ModelDir(model_dir)
    problem = model.listing_problem()
    if problem is not None:
        plan.add_finding("MODEL", "error", problem.reason)
        say(problem.reason)
        return None
    try:
        profile = load_profile(card)
    except ValueError as exc:
        plan.add_finding("PROFILE", "error", str(exc))
        say(f"{exc}; no repairs")
        return None
    plan.facts = gather_facts(model)
    # The flags of a --config file count as the user's where the engine reads one (None: unknown,
    # read: a file the engine ignores only makes the repairs stand back).
    user = UserArgs(user_args, read_config=profile.serve_config_file is not False)
    ctx = Context(model=model, profile=profile, facts=plan.facts, user=user, env=env, doctor=ask_engine_config)
    skipped = _skipped_codes(env)
    for rule in REGISTRY:
        if skipped and _normalize(rule.code) in skipped:
            say(f"{rule.code}: skipped (COMPAT_SKIP)")
            continue
        try:
            outcome = rule.check(ctx)
        except Exception as exc:  # a rule bug must not cost the other repairs
            plan.add_finding(rule.code, "warning", f"rule failed ({type(exc).__name__}: {exc}); skipped")
            say(f"{rule.code}: rule failed ({type(exc).__name__}: {exc}); skipped")
            continue
        plan.repairs.extend(outcome.repairs)
        plan.findings.extend(outcome.findings)
    seen = set()
    for bad in model.problems:
        if bad.message() not in seen:
            seen.add(bad.message())
            plan.add_finding("INPUT", "warning", bad.message())
    for finding in plan.findings:
        say(f"{finding.code} {finding.severity}: {finding.message}")
    plan.work_dir = make_run_dir(env, model.path)
    for repair in plan.repairs:
        if repair.work_file is not None:
            _write_work_file(plan, repair)
        if repair.engine_patch is not None and patch_engine:
            _patch_engine(plan, repair, _engine_file(repair), write=True)
    pending = Pending(plan, model, profile, user, env, model_dir)
    _materialize(pending, ask_engine_config)
    return pending


def finish_plan(pending: Pending, answers: List[Answer]) -> Plan:
    """Apply the answers to pending.requests (in order; fewer answers than requests: the rest
    could not be checked), join the arguments, write report.json."""
    answers = list(answers) + [(None, "not checked", {})] * (len(pending.requests) - len(answers))
    _apply_answers(pending, answers)
    _assemble(pending.plan, pending.user, pending.env)
    _write_report(pending.plan)
    return pending.plan


def _overlay_edits(repairs: List[Repair]) -> Dict[str, List[Dict]]:
    """The tokenizer files the overlay repairs rewrite: name -> edits, in repair order."""
    edits: Dict[str, List[Dict]] = {}
    for repair in repairs:
        for name, edit in repair.overlay.items():
            edits.setdefault(name, []).append(edit)
    return edits


def _build_tokenizer_overlay(plan: Plan, model: ModelDir) -> Optional[Tuple[str, List[Repair]]]:
    """The tokenizer overlay of the repairs that rewrite tokenizer files: (its path, those
    repairs), or None when there are none or it could not be written (then they are dropped)."""
    overlay_repairs = [r for r in plan.repairs if r.overlay]
    if not overlay_repairs:
        return None
    from .overlay import build_overlay, tokenizer_file

    edits = _overlay_edits(overlay_repairs)
    codes = "+".join(r.code for r in overlay_repairs)
    dest = os.path.join(plan.work_dir, TOKENIZER_OVERLAY) if plan.work_dir else None
    try:
        if dest is None:
            raise OSError(0, "no writable work directory")
        build_overlay(model, dest, edits, keep=tokenizer_file)
    except (OSError, ValueError) as exc:  # no work dir, a full disk: the overlay repairs only are lost
        reason = f"the overlay could not be written ({getattr(exc, 'strerror', None) or exc})"
        for repair in overlay_repairs:
            repair.verified, repair.verification = False, reason
        plan.add_finding(overlay_repairs[0].code, "error", f"{codes} dropped: {reason}")
        say(f"{codes} dropped: {reason}")
        return None
    for repair in overlay_repairs:
        repair.args = ["--tokenizer", dest]
        say(f"{repair.code} {repair.title}: {repair.detail}")
    return dest, overlay_repairs


def _apply_tokenizer_verdict(plan: Plan, overlay_repairs: List[Repair], ok: Optional[bool], reason: str) -> None:
    codes = "+".join(r.code for r in overlay_repairs)
    for repair in overlay_repairs:
        repair.verified, repair.verification = ok, reason
    if ok:
        say(f"{codes} verified: {reason}")
    else:
        state = "failed" if ok is False else "unavailable"
        message = f"{codes} dropped: verification {state}: {reason}"
        plan.add_finding(overlay_repairs[0].code, "error" if ok is False else "warning", message)
        say(message)


def _materialize(pending: Pending, ask_engine_config: bool) -> None:
    """Write what the repairs need beyond arguments (the tokenizer overlay, a rewritten config.json
    or a model view) and list what the engine's Python must check of it, engine patches included."""
    plan, model = pending.plan, pending.model
    if plan.repairs:  # a clean model writes nothing and imports none of this
        from .model_view import carry

        tokenizer = pending.tokenizer = _build_tokenizer_overlay(plan, model)
        # The processor loads its tokenizer from the model path: a model with one gets the overlay's
        # tokenizer files in a view too (common/start/model_view.py).
        overlay_edits = _overlay_edits(tokenizer[1]) if tokenizer else None
        pending.carried = carry(plan, model, pending.profile, pending.user, overlay_edits, tokenizer[1] if tokenizer else None)
    carried, tokenizer = pending.carried, pending.tokenizer
    patches = pending.patches = [r for r in plan.repairs if r.engine_patch is not None and r.verified is None]
    checked = pending.checked = [r for r in plan.repairs if r.engine_check is not None and r.verified is None and r not in patches]
    for repair in plan.repairs:
        if (
            repair.verified is None
            and not repair.verification
            and not repair.overlay
            and repair not in patches
            and repair not in checked
            and not (carried is not None and repair in carried.repairs and carried.config_dir)
        ):
            repair.verified = True  # nothing beyond its own arguments to check
    trust = pending.user.has("--trust-remote-code")
    requests = [{"kind": "module", "name": r.engine_patch[0]} for r in patches]
    requests += [r.engine_check for r in checked]
    if tokenizer is not None:
        requests.append({"kind": "tokenizer", "overlay": tokenizer[0], "model": model.path})
    carried_requests = carried.requests(trust) if carried is not None and carried.config_dir else []
    registered = _registered_config_types(plan)
    if registered:
        # R12's classes: the engine's process registers them before it reads a rewritten config too
        # (a vision-language wrapper's nested text_config of such a type, R5's edits in it).
        carried_requests = [dict(r, register=registered) if r["kind"] == "config" else r for r in carried_requests]
    requests += carried_requests
    pending.carried_requests = len(carried_requests)
    if ask_engine_config and model.state("config.json").exists and _engine_reads_with_transformers(plan, model, pending.profile):
        request = {"kind": "config", "path": model.path, "trust_remote_code": trust, "attributes": []}
        if registered:
            request["register"] = registered  # R12's classes: the engine's process registers them too
        requests.append(request)
        pending.config_request = True
    pending.requests = requests


def _registered_config_types(plan: Plan) -> List[str]:
    """The model types R12's repair asks the engine's process to register a config class for."""
    repairs = [r for r in plan.repairs if r.code == "R12"]
    if not repairs:
        return []  # the plugin's table is imported only for a model R12 repairs
    from ..vllm_plugin.compat_configs import ENV, parse

    return sorted({t for r in repairs for t in parse(r.env.get(ENV, ""))})


def _engine_reads_with_transformers(plan: Plan, model: ModelDir, profile: Profile) -> bool:
    """Whether the engine hands config.json to its transformers' AutoConfig. A model type the
    engine reads with a config class of its own (profile: own_config_classes, e.g. vLLM 0.11's
    RWConfig for RefinedWeb) never reaches AutoConfig, which would refuse it: asking it would
    contradict the engine."""
    model_type = model.json_object("config.json").get("model_type")
    own = profile.own_config_classes or {}
    if isinstance(model_type, str) and model_type in own:
        say(f"config.json: vLLM {profile.vllm_version} reads model_type {model_type!r} with its own {own[model_type]}, not AutoConfig")
        return False
    return True


def _apply_answers(pending: Pending, answers: List[Answer]) -> None:
    plan, patches, tokenizer, carried = pending.plan, pending.patches, pending.tokenizer, pending.carried
    answers = list(answers)
    for repair in patches:
        ok, reason, answer = answers.pop(0)
        if ok:
            _patch_engine(plan, repair, answer.get("path", ""), write=False)
        else:
            _drop_unchecked(plan, repair, ok, f"the engine's {repair.engine_patch[0]}: {reason}")
    for repair in pending.checked:
        ok, reason, _ = answers.pop(0)
        if ok:
            repair.verified, repair.verification = True, reason
            say(f"{repair.code} verified: {reason}")
        else:
            _drop_unchecked(plan, repair, ok, reason)
    if tokenizer is not None:
        ok, reason, _ = answers.pop(0)
        _apply_tokenizer_verdict(plan, tokenizer[1], ok, reason)
    if pending.carried_requests and carried is not None:
        from .model_view import apply_verdict

        taken = [answers.pop(0) for _ in range(pending.carried_requests)]
        ok, reason, answer = taken[0]
        apply_verdict(plan, carried, ok, reason, answer, pending.user, pending.model_arg, taken[1:])
    if pending.config_request:
        ok, reason, _ = answers.pop(0)
        _config_verdict(plan, ok, reason)


def _drop_unchecked(plan: Plan, repair: Repair, ok: Optional[bool], reason: str) -> None:
    repair.verified, repair.verification = ok, reason
    severity = "error" if ok is False else "warning"
    plan.add_finding(repair.code, severity, f"{repair.code} not applied: {reason}")
    say(f"{repair.code} not applied: {reason}")


def _config_verdict(plan: Plan, ok: Optional[bool], reason: str) -> None:
    """What the engine's own AutoConfig says of the model's config.json (doctor)."""
    if ok:
        say(f"the engine's transformers reads config.json: {reason}")
        return
    if ok is None:
        plan.add_finding("CONFIG", "unverified", f"the engine's transformers could not be asked to read config.json: {reason}")
    elif "custom code" in reason or "trust_remote_code" in reason:  # transformers' own refusal of remote code
        if not any(f.code == "REMOTE_CODE" for f in plan.findings):
            plan.add_finding("REMOTE_CODE", "error", f"the engine's transformers refuses config.json: {reason}")
    else:
        plan.add_finding("CONFIG", "error", f"the engine's transformers cannot read config.json: {reason}")


def _normalize(code: str) -> str:
    from ..codes import normalize  # the code registry: only a start with COMPAT_SKIP pays for it

    return normalize(code)


def _skipped_codes(env: Mapping[str, str]) -> set:
    """COMPAT_SKIP=R2,H1: rules an operator turned off for this start (an escape hatch short of
    COMPAT_DISABLE, which turns off everything). Codes match in any case; an unknown one is said."""
    skipped = {_normalize(code) for code in env.get("COMPAT_SKIP", "").split(",") if code.strip()}
    if not skipped:
        return skipped
    unknown = (
        skipped - {_normalize(rule.code) for rule in REGISTRY} - {"MB"}
    )  # MB: doctor's model build (common/doctor/model_build_finding.py)
    if unknown:
        say(f"COMPAT_SKIP names {', '.join(sorted(unknown))}, which no runtime rule has; ignored")
    return skipped


def _write_work_file(plan: Plan, repair: Repair) -> None:
    flag, name, text = repair.work_file
    path = os.path.join(plan.work_dir or "", name)
    try:
        if not plan.work_dir:
            raise OSError(0, "no writable work directory")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        repair.verified, repair.verification = False, f"{path} could not be written ({exc.strerror})"
        plan.add_finding(repair.code, "error", f"{repair.code} dropped: {repair.verification}")
        say(f"{repair.code} dropped: {repair.verification}")
        return
    repair.args = [flag, path] + repair.args


def _engine_file(repair: Repair) -> str:
    """The engine module's file for this interpreter (the engine's own, inside the image); "" when
    it is not there (patch_file then names the problem)."""
    from ..engine.patching import PatchError, module_file

    try:
        return module_file(repair.engine_patch[0])
    except PatchError:
        return ""


def _patch_engine(plan: Plan, repair: Repair, path: str, write: bool) -> None:
    """Apply (launch) or check without writing (preflight) an edit of the engine's source file
    `path`; a missing file or anchor drops the repair with a finding that names them."""
    from ..engine.patching import PatchError, patch_file

    module, transform = repair.engine_patch
    try:
        if not path:
            raise PatchError(f"module {module!r} has no source file for this Python")
        result = patch_file(path, transform, write=write)
        repair.verification = f"{result.path}: {result.status}"
        repair.verified = True
        say(f"{repair.code} {repair.title}: {repair.detail} ({repair.verification})")
    except Exception as exc:  # PatchError, OSError, or a transform's bug: this repair only is lost
        detail = str(exc) if isinstance(exc, (PatchError, OSError)) else f"{type(exc).__name__}: {exc}"
        repair.verified, repair.verification = False, detail
        plan.add_finding(repair.code, "error", f"{repair.code} not applied: {detail}")
        say(f"{repair.code} not applied: {detail}")


def _assemble(plan: Plan, user: UserArgs, env: Mapping[str, str]) -> None:
    """Args and env of the verified repairs, deduplicated, with the user's arguments winning."""
    args: List[str] = []
    overrides: Dict = {}
    for repair in plan.repairs:
        if repair.verified is not True:
            continue
        if not repair.overlay and repair.engine_patch is None:  # the others were logged when checked
            say(f"{repair.code} {repair.title}: {repair.detail}")
        if repair.args and not _contains(args, repair.args):
            args.extend(repair.args)
        overrides.update(repair.hf_overrides)
        for key, value in repair.path_prepend.items():
            current = plan.env.get(key, env.get(key, ""))
            plan.env[key] = value + (os.pathsep + current if current else "")
        for key, value in repair.env.items():
            if key in env:
                say(f"{repair.code}: {key} is already set to {env[key]!r}; left as given")
            else:
                plan.env[key] = value
    plan.args, plan.user_args, problem = join_args(args, overrides, user)
    if problem:
        plan.add_finding("ARGS", "warning", problem)
        say(problem)
    if plan.args or plan.env:
        say(f"adding args {plan.args} env {plan.env}")
    else:
        say("no repairs needed: vLLM starts with the given arguments only")


def _contains(haystack: List[str], needle: List[str]) -> bool:
    n = len(needle)
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def _write_report(plan: Plan) -> None:
    if not plan.work_dir:
        say("report.json not written: no writable work directory")
        return
    path = os.path.join(plan.work_dir, "report.json")
    try:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(plan.to_json(), fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        say(f"report: {path}")
    except (OSError, ValueError) as exc:  # ValueError: text the file's encoding cannot hold
        say(f"report.json could not be written ({getattr(exc, 'strerror', None) or exc})")
