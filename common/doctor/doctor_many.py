"""doctor over many models: "of these submissions, how many start on each card, and what decides it?"

`doctor PATH... --card CARD|all`: each PATH is a model directory or a folder of model folders.
One row per model and card (starts as is / starts with repairs / fails / unverified, with the
codes that decide it), then totals per card: how many would start without the image's repairs
and how many with them. The rules run in this process for every model; the engine-side checks of
all the models of one card go to ONE engine-Python process (verify.run_checks_of_many), not one
per model, and the engine's model classes of all of them (MB, common/doctor/model_build_finding.py) to one more,
which imports the engine's vLLM once. Progress goes to stderr, one line per model and card; a
model that breaks doctor is a row with its error ("error"), never the end of the run.

Exit: 1 when any row fails, else 2 when any is unverified or an error, else 0.
"""

from __future__ import annotations

import json
import os
import sys

from ..engine.engines import describe, resolve
from ..engine.profile import PROFILE_DIR, VARIANT_SEP, load_profile, variants_of
from ..plan import Plan
from ..start.log import set_stream
from ..start.preflight import finish_plan, start_plan
from .doctor import judge, remove_work_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

    from ..engine.engines import EnginePython
    from ..start.preflight import Pending
    from ..start.verify import Warm

ALL = "all"
# Files only a model directory has at its top: a directory with none of them and with
# subdirectories is a folder of models.
MODEL_MARKERS = (
    "config.json",
    "adapter_config.json",
    "params.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "model.safetensors.index.json",
)
MODEL_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
STATES = {"as is": "starts as is", "repaired": "starts with repairs", "fails": "fails", "unverified": "unverified", "error": "error"}


def is_folder_of_models(path: str) -> bool:
    """Whether `path` holds model folders rather than being a model itself."""
    try:
        names = os.listdir(path)
    except OSError:
        return False
    if any(n in MODEL_MARKERS or n.endswith(MODEL_SUFFIXES) for n in names):
        return False
    return any(not n.startswith(".") and os.path.isdir(os.path.join(path, n)) for n in names)


def model_dirs(paths: Sequence[str]) -> List[str]:
    """Each path as given, a folder of models replaced by its model folders (sorted; hidden
    ones left out). A path that is no directory stays: its row says so."""
    out: List[str] = []
    for path in paths:
        if os.path.isdir(path) and is_folder_of_models(path):
            out += [
                os.path.join(path, n) for n in sorted(os.listdir(path)) if not n.startswith(".") and os.path.isdir(os.path.join(path, n))
            ]
        else:
            out.append(path)
    return out


def cards_of(card: str) -> List[str]:
    """The engine profiles to judge: every one here for `all` (each card, then its variants),
    else the card and its variants (only itself for `card@variant`)."""
    if card != ALL:
        return variants_of(card)
    names = sorted(n[:-5] for n in os.listdir(PROFILE_DIR) if n.endswith(".json"))
    return sorted(names, key=lambda n: (n.split(VARIANT_SEP)[0], VARIANT_SEP in n, n))


class Progress:
    """One line per model and card on stderr (or nowhere, when stderr is closed)."""

    def __init__(self, stream: Optional[TextIO]) -> None:
        self.stream = stream

    def say(self, text: str) -> None:
        if self.stream is None:
            return
        try:
            print(f"doctor: {text}", file=self.stream, flush=True)
        except (OSError, ValueError):
            self.stream = None


def row_of(model: str, card: str, data: Dict[str, Any]) -> Dict[str, Any]:
    """The table row of one model on one card, from its judged plan."""
    repairs = [r["code"] for r in data["repairs"] if r["verified"]]
    internal = [f["message"] for f in data["findings"] if f["code"] == "INTERNAL"]
    if internal:
        return error_row(model, card, internal[0])
    state = "repaired" if data["verdict"] == "starts" and (repairs or data["args"] or data["env"]) else data["verdict"]
    state = "as is" if state == "starts" else state
    return {
        "model": model,
        "card": card,
        "verdict": data["verdict"],
        "state": STATES[state],
        "repairs": repairs,
        "failing": data["failing"],
        "unverified": data["unverified"],
        "args": data["args"],
        "env": data["env"],
        "tokens": data.get("tokens", "unproven"),
        # The tensor-parallel size tokens were judged at (the platform's), and at the smallest
        # size memory says holds the model where that is another.
        "tokens_tp": data.get("tokens_tp", 1),
        "tokens_at_smallest_tp": data.get("tokens_at_smallest_tp"),
        # What no exact cell covered (`field=value`): why tokens are not proven.
        "tokens_open": data.get("tokens_open") or [],
        "memory": data.get("memory"),
        # What decides the verdict, each finding with its message (MB carries the engine's own).
        "findings": [f for f in data["findings"] if f["severity"] in ("error", "unverified")],
        "error": None,
    }


def error_row(model: str, card: str, message: str) -> Dict[str, Any]:
    return {
        "model": model,
        "card": card,
        "verdict": "error",
        "state": STATES["error"],
        "repairs": [],
        "failing": [],
        "unverified": [],
        "args": [],
        "env": {},
        "tokens": "unproven",
        "tokens_tp": 1,
        "tokens_at_smallest_tp": None,
        "tokens_open": [],
        "memory": None,
        "findings": [],
        "error": message,
    }


def judge_card(
    models: Sequence[str], card: str, vllm_args: Sequence[str], env: Mapping[str, str], engine: EnginePython, progress: Progress, keep: bool
) -> List[Dict[str, Any]]:
    """Every model on one card, a row each in the order of `models`: the rules of each, then all
    their checks in one engine process."""
    from .model_build_finding import warm_up

    card_env = engine.env(env)
    # The model build's process first: its import of vLLM and torch (most of its time) runs
    # beside the rules and the checks below.
    warm = warm_up(card_env) if models else None
    try:
        return _judge_card(models, card, vllm_args, card_env, engine, progress, keep, warm)
    finally:
        if warm is not None:
            warm.close()  # not handed its requests (an error on the way): not left running


def _judge_card(
    models: Sequence[str],
    card: str,
    vllm_args: Sequence[str],
    card_env: Mapping[str, str],
    engine: EnginePython,
    progress: Progress,
    keep: bool,
    warm: Optional[Warm],
) -> List[Dict[str, Any]]:
    from ..start.verify import run_checks_of_many, verify_timeout
    from .model_build_finding import check as build_models
    from .model_build_finding import request_for, skipped

    started: List[Tuple[int, Plan, Optional[Pending]]] = []
    rows: List[Optional[Dict[str, Any]]] = [None] * len(models)
    for i, model in enumerate(models):
        plan = Plan(card=card, model_dir=os.path.abspath(model))
        try:
            if not os.path.isdir(model):
                raise ValueError(f"{model} is not a directory")
            started.append((i, plan, start_plan(model, card, vllm_args, card_env, plan, ask_engine_config=True)))
        except Exception as exc:  # a bug, or a model no rule expected: its row, not the end of the run
            rows[i] = error_row(model, card, f"{type(exc).__name__}: {exc}")
            _cleanup(plan, keep)
    requests = [r for _, _, pending in started if pending is not None for r in pending.requests]
    with_checks = sum(1 for _, _, pending in started if pending is not None and pending.requests)
    if requests:
        progress.say(f"{card}: {len(requests)} checks of {with_checks} models, one process: {engine.describe()}")
    # The whole list's checks share the process: each model's share of the time limit adds up.
    verdicts = run_checks_of_many(requests, card_env, verify_timeout(card_env) * max(1, with_checks)) if requests else []
    answers = [(v.ok, v.reason, v.result) for v in verdicts]
    finished: List[Tuple[int, Plan]] = []
    for i, plan, pending in started:
        try:
            if pending is not None:
                taken, answers = answers[: len(pending.requests)], answers[len(pending.requests) :]
                finish_plan(pending, taken)
            finished.append((i, plan))
        except Exception as exc:
            rows[i] = error_row(models[i], card, f"{type(exc).__name__}: {exc}")
            _cleanup(plan, keep)
    # The engine's model classes, all the finished plans' in one more engine process (vLLM and
    # torch): it needs each plan's final arguments and model view, so it comes after the checks.
    to_build = sum(1 for _, plan in finished if request_for(plan) is not None)
    if to_build and not skipped(card_env):
        progress.say(f"{card}: the engine's model classes of {to_build} models, one process: {engine.describe()}")
    try:
        build_models([plan for _, plan in finished], card_env, warm)
    except Exception as exc:  # a bug of the model build: every row says so, none is judged without it
        for _, plan in finished:
            plan.add_finding("INTERNAL", "error", f"the model build failed: {type(exc).__name__}: {exc}")
    for i, plan in finished:
        try:
            rows[i] = row_of(models[i], card, judge(plan.to_json()))
        except Exception as exc:
            rows[i] = error_row(models[i], card, f"{type(exc).__name__}: {exc}")
        finally:
            _cleanup(plan, keep)
    done = [r if r is not None else error_row(models[i], card, "not judged") for i, r in enumerate(rows)]
    for n, row in enumerate(done, 1):
        progress.say(f"{card} [{n}/{len(done)}] {row['model']}: {_outcome(row)}")
    return done


def _cleanup(plan: Plan, keep: bool) -> None:
    if not keep:
        remove_work_dir(plan)


def _outcome(row: Dict[str, Any]) -> str:
    codes = {
        "starts as is": [],
        "starts with repairs": row["repairs"],
        "fails": row["failing"],
        "unverified": row["unverified"],
    }.get(row["state"])
    if codes is None:
        return f"error ({row['error']})"
    return row["state"] + (f" ({', '.join(codes)})" if codes else "")


def totals(rows: Sequence[Dict[str, Any]], card: str) -> Dict[str, int]:
    mine = [r for r in rows if r["card"] == card]
    count = {state: sum(1 for r in mine if r["state"] == label) for state, label in STATES.items()}
    return {
        "models": len(mine),
        "start_without_repairs": count["as is"],
        "start_with_repairs": count["as is"] + count["repaired"],
        "repaired": count["repaired"],
        "fail": count["fails"],
        "unverified": count["unverified"],
        "errors": count["error"],
    }


def _tokens_cell(row: Dict[str, Any]) -> str:
    """`proven`, or `unproven` with the first values no exact cell covered."""
    tokens, open_values = row.get("tokens") or "-", row.get("tokens_open") or []
    if not open_values:
        return tokens
    more = f" and {len(open_values) - 2} more" if len(open_values) > 2 else ""
    return f"{tokens}: {', '.join(open_values[:2])}{more}"


def markdown(report: Dict[str, Any]) -> str:
    cards = report["cards"]
    lines = [f"doctor: {len(report['models'])} models on {', '.join(cards)}", ""]
    lines += ["| model | card | verdict | codes | tokens | memory |", "|---|---|---|---|---|---|"]
    for row in report["rows"]:
        codes = _outcome(row)[len(row["state"]) :].strip(" ()") if row["state"] != "error" else row["error"]
        lines.append(
            f"| {_cell(row['model'])} | {row['card']} | {row['state']} | {_cell(codes) or '-'} | {_cell(_tokens_cell(row))} "
            f"| {_cell(_memory_cell(row.get('memory')))} |"
        )
    lines += [
        "",
        "| card | vLLM | models | start without the image's repairs | start with them | fail | unverified | errors | checked with |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for card, info in cards.items():
        t = info["totals"]
        where = describe(info["engine_python"])
        lines.append(
            f"| {card} | {info['vllm_version']} | {t['models']} | {t['start_without_repairs']} | {t['start_with_repairs']} "
            f"| {t['fail']} | {t['unverified']} | {t['errors']} | {_cell(where)} |"
        )
    return "\n".join(lines) + "\n"


def _memory_cell(memory: Optional[Dict[str, Any]]) -> str:
    """Where the model fits on the card's node: the tensor-parallel size, or what stops it."""
    if not memory or memory.get("fits") is None:
        return "-"
    from ..memory.memory_fit import summary

    return summary(memory)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def run(
    paths: Sequence[str], card: str, vllm_args: Sequence[str], env: Mapping[str, str], as_json: bool, keep_work_dir: bool = False
) -> int:
    models = model_dirs(paths)
    names = cards_of(card)
    progress = Progress(sys.stderr)
    # The per-decision [compat] lines of hundreds of plans would bury the progress lines.
    set_stream(None)
    report: Dict[str, Any] = {"models": models, "cards": {}, "rows": []}
    by_card: Dict[str, List[Dict[str, Any]]] = {}
    try:
        for name in names:
            profile = load_profile(name)
            engine = resolve(name, env, asked=card != ALL and name == names[0])
            by_card[name] = judge_card(models, name, vllm_args, env, engine, progress, keep_work_dir)
            report["cards"][name] = {"vllm_version": profile.vllm_version, "engine_python": engine.to_json()}
    finally:
        set_stream(sys.stderr)
    rows = report["rows"] = [by_card[name][i] for i in range(len(models)) for name in names]  # a model's cards together
    for name in names:
        report["cards"][name]["totals"] = totals(rows, name)
    print(json.dumps(report, indent=2, ensure_ascii=False) if as_json else markdown(report), end="\n" if as_json else "")
    verdicts = {r["verdict"] for r in rows}
    return 1 if "fails" in verdicts else 2 if verdicts & {"unverified", "error"} else 0
