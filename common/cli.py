"""python3 -m common {preflight,doctor,triage,launch} ...

preflight MODEL_DIR --card CARD [--json] [--dry-run] [--no-verify] [-- VLLM_ARGS...]
    print the plan the image would apply (never execs; exit 0 whatever the model holds)
doctor MODEL_DIR... --card CARD|all [--json] [-- VLLM_ARGS...]
    the plan with verification as a table; exit 0: the image starts it, 1: it fails even repaired,
    2: usage error or verification impossible here. Several models (paths, or a folder of model
    folders) or `--card all`: one row per model and card, and totals per card
triage PATH... [--card CARD] [--json]
    map failure logs (files, folders, .gz, JSON error reports) to the rule that fixes them
explain [CODE]
    the page of a code (R3b, L1, OOM, ...; any case) from the registry, or the list of codes
launch -- VLLM_ARGS...
    what the image's entrypoint runs: preflight, then exec `vllm serve MODEL_DIR <repairs> ARGS`
"""

from __future__ import annotations


import json
import os
import sys

from .start.log import say

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Optional, Tuple


def _split(argv: List[str]) -> Tuple[List[str], List[str]]:
    """Our options before the first `--`, the vLLM arguments after it."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def _preflight_args(pre) -> None:
    pre.add_argument("model_dir")
    pre.add_argument("--card", default=None, help="card profile (default: COMPAT_CARD or the image's card)")
    pre.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    pre.add_argument(
        "--dry-run", action="store_true", help="leave nothing behind: the work dir the plan wrote is removed (preflight never execs)"
    )
    pre.add_argument("--keep-work-dir", action="store_true", help="with --dry-run: keep the work dir, for debugging")
    pre.add_argument("--no-verify", action="store_true", help="skip verification (repairs that need it are then dropped)")


def _doctor_args(doc) -> None:
    doc.add_argument("model_dir", nargs="+", help="model directories, or folders of model folders")
    doc.add_argument("--card", default=None, help="card profile, or `all` (default: COMPAT_CARD or the image's card)")
    doc.add_argument("--json", action="store_true", help="the preflight JSON plus verdict and failing codes")
    doc.add_argument("--keep-work-dir", action="store_true", help="keep the work dir doctor wrote, for debugging")


def _triage_args(tri) -> None:
    tri.add_argument("paths", nargs="+", metavar="PATH")
    tri.add_argument("--card", default=None, help="the card the logs come from (default: guessed from each path)")
    tri.add_argument("--json", action="store_true", help='print {"files": [...], "summary": {...}}')


def _explain_args(exp) -> None:
    exp.add_argument("code", nargs="?", help="a code such as R3b, L1 or OOM (any case); none lists every code")


COMMANDS = {
    "preflight": ("print the plan the image would apply to a model", _preflight_args),
    "doctor": ("preflight with verification, as a table; exit 1 if the model will fail", _doctor_args),
    "triage": ("map failure logs to the rule that fixes them", _triage_args),
    "explain": ("the page of a rule, build patch or triage code", _explain_args),
    "launch": ("preflight, then exec vllm serve (the image entrypoint)", None),
}


def _parser(command: Optional[str] = None):  # -> argparse.ArgumentParser; the launch path never needs it
    """The parser of one known command (argparse costs milliseconds per argument), or of all."""
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m common", description="enginex-compat preflight and launcher")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_text, add_args) in COMMANDS.items():
        if command in COMMANDS and name != command:
            continue
        cmd = sub.add_parser(name, help=help_text)
        if add_args is not None:
            add_args(cmd)
    return parser


def _print_human(plan_json: dict) -> None:
    facts = plan_json["facts"]
    print(f"card: {plan_json['card']}    model: {plan_json['model_dir']}")
    for key in ("architectures", "model_type", "head_size", "tokenizer_kind", "tokenizer_class", "chat_template_source"):
        print(f"  {key:22} {facts.get(key)}")
    print("repairs:" if plan_json["repairs"] else "repairs: none")
    for r in plan_json["repairs"]:
        state = {True: "verified", False: "FAILED verification, dropped", None: "not verified, dropped"}[r["verified"]]
        print(f"  {r['code']:4} {r['title']}  [{state}]")
        print(f"       {r['detail']}")
        if r.get("verification"):
            print(f"       check: {r['verification']}")
    print("findings:" if plan_json["findings"] else "findings: none")
    for f in plan_json["findings"]:
        print(f"  {f['code']:7} {f['severity']:8} {f['message']}")
    if plan_json.get("view"):
        print(f"model view: {plan_json['view']['path']} ({plan_json['view']['why']})")
    print("vllm serve " + " ".join([plan_json["model_path"]] + plan_json["args"] + plan_json["user_args"]))
    for key, value in plan_json["env"].items():
        print(f"  env {key}={value}")


def _doctor(opts, card: str, vllm_args: List[str]) -> int:
    from .doctor.doctor import run as doctor
    from .doctor.doctor_many import ALL, is_folder_of_models
    from .doctor.doctor_many import run as doctor_many
    from .engine.profile import load_profile

    paths = opts.model_dir
    if len(paths) == 1 and not os.path.isdir(paths[0]):  # among many, a bad path is a row with its error
        print(f"doctor: {paths[0]} is not a directory", file=sys.stderr)
        return 2
    try:
        if card != ALL:
            load_profile(card)
    except ValueError as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return 2
    if len(paths) > 1 or card == ALL or is_folder_of_models(paths[0]):
        return doctor_many(paths, card, vllm_args, os.environ, opts.json, opts.keep_work_dir)
    return doctor(paths[0], card, vllm_args, os.environ, opts.json, opts.keep_work_dir)


def _explain(code: Optional[str]) -> int:
    from .codes import all_codes, index, lookup, page

    codes = all_codes()
    if code is None:
        print(index(codes), end="")
        return 0
    entry = lookup(code, codes)
    if entry is None:
        print(f"explain: no code {code!r}; known: {', '.join(c.code for c in codes)}", file=sys.stderr)
        return 2
    print(page(entry), end="")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, vllm_args = _split(argv)
    if ours == ["launch"]:  # the container-start path: no option parsing to pay for
        from .start.launch import launch

        launch(vllm_args, os.environ)
    opts = _parser(ours[0] if ours else None).parse_args(ours)
    if opts.command == "launch":
        print("launch takes no options of its own; vLLM arguments go after --", file=sys.stderr)
        return 2
    if opts.command == "explain":
        return _explain(opts.code)
    if opts.command == "triage":
        from .triage import run as triage

        return triage(opts.paths, opts.card, opts.json)
    from .plan import Plan
    from .start.preflight import build_plan
    from .engine.profile import image_card

    card = opts.card or os.environ.get("COMPAT_CARD") or image_card()
    if opts.command == "preflight" and card == "all":
        print("preflight: --card all is for doctor; name one card", file=sys.stderr)
        return 2
    if not card:
        print("preflight: no card given; pass --card (nv-a100, hygon-k100, iluvatar-bi100) or set COMPAT_CARD", file=sys.stderr)
        return 2
    if opts.command == "doctor":
        return _doctor(opts, card, vllm_args)
    # The decision log goes to stderr, so in --json mode stdout carries exactly one object.
    plan = Plan(card=card, model_dir=os.path.abspath(opts.model_dir))
    try:
        build_plan(opts.model_dir, card, vllm_args, os.environ, verify=not opts.no_verify, plan=plan)
    except Exception as exc:  # a bug must still leave the user a plan to read
        plan.add_finding("INTERNAL", "error", f"preflight failed: {type(exc).__name__}: {exc}")
        say(f"preflight failed: {type(exc).__name__}: {exc}")
    if opts.dry_run and not opts.keep_work_dir:
        from .doctor.doctor import remove_work_dir

        remove_work_dir(plan)
    return _show(plan.to_json(), opts.json)


def _show(data: dict, as_json: bool) -> int:
    """Print the plan whatever it holds and wherever stdout goes: closed (nothing to print to),
    a closed pipe, a C locale (text it cannot encode is escaped, never a crash)."""
    out = sys.stdout
    if out is None:  # fd 1 was closed when Python started
        return 0
    try:
        if as_json:
            print(_plan_text(data, getattr(out, "encoding", None) or "utf-8"))
        else:
            if hasattr(out, "reconfigure"):
                out.reconfigure(errors="backslashreplace")
            _print_human(data)
        out.flush()
    except (OSError, ValueError) as exc:  # BrokenPipeError: the reader left
        say(f"the plan could not be printed ({type(exc).__name__}: {exc})")
        try:  # the interpreter flushes stdout once more at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
        except (OSError, ValueError, AttributeError):
            pass
    return 0


def _plan_text(data: dict, encoding: str) -> str:
    """The plan as strict JSON text: as it is when it can be, with every value JSON can not hold
    as text otherwise; in ASCII escapes when stdout's encoding can not take a character (a C
    locale, or a lone surrogate from a non-UTF-8 argument)."""
    try:
        text = json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as exc:
        say(f"the plan holds a value JSON cannot carry ({type(exc).__name__}); printed as text")
        data = _jsonable(data)
        text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        text = json.dumps(data, indent=2, ensure_ascii=True, allow_nan=False)
    return text


def _jsonable(value, depth: int = 0):
    """`value` with what strict JSON cannot hold (NaN, infinities, other types, nesting past 64
    levels) turned into text."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):  # past ~4300 digits Python will not write an int as text
        return value if value.bit_length() < 10000 else f"<an integer of {value.bit_length()} bits>"
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if depth < 64 and isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if depth < 64 and isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    return repr(value)[:1000]
