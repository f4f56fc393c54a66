"""Run the conformance matrix: every case on every card's engine, through that card's launcher.

For each engine generation (conformance/cases.py ENGINES) one worker process in the engine's
venv runs the cells of its cards (harness/engine_worker.py); engines run side by side as
cores allow. Each answered cell is compared with its saver's reference: `exact` or `differs`;
a start that failed is `refused`, a first request that failed is `crashed`, each with the code
triage gives its log. Then doctor judges every model on every card (one doctor process per
card, verified with that card's engine), and the cell records its verdict.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from common.engine.conformance_cells import fields_table
from common.engine.start_flags import served_dtype
from common.engine.vllm_args import UserArgs
from common.model.config_traits import config_traits, sharding
from common.model.config_values import config_values
from common.start.log import PREFIX
from common.triage import scan, signatures
from harness.cores import pin_env, rank_binds
from harness.engine import vllm_cache
from harness.engine_env import COMMON_ENV

from .cases import AUTHOR, ENGINES, PLATFORM_ARGS, ROOT, SAVERS, Engine, load_cases, tensor_parallel, tp_args, tp_sizes
from .fingerprint import doctor_fingerprint, fingerprint
from .models import CACHE, ensure, model_dir, record

LAUNCHER_PREFIX = PREFIX.encode()

RESULTS = Path(__file__).resolve().parent / "results.json"
WORKER = "harness.engine_worker"


def cell_values(config: Dict[str, Any], vllm: str, architecture: str, tp: int, args: List[str]) -> Dict[str, List[str]]:
    """The value classes a cell's saved config exercised (common/model/config_values.py), for the
    fields its architecture's model code reads on that engine (common/engine/model_fields.json),
    started with `args` (the dtype they serve)."""
    fields = fields_table().get("engines", {}).get(vllm, {}).get(architecture, [])
    return config_values(config, fields, None, int(tp or 1), dtype=served_dtype(config, UserArgs(args).value("--dtype")))


def cell_id(case: str, saver: str, card: str, tp: int = 1) -> str:
    return f"{case}|{saver}|{card}" + (f"|tp{tp}" if tp > 1 else "")


def cell_key(cell: Dict[str, Any]) -> Tuple[str, str, str, int]:
    """A results.json cell's identity: its case, who saved it, its card, its tensor-parallel size."""
    return (cell["variant"], cell["saved_by"], cell["card"], int(cell.get("tp") or 1))


def plan_cells(engine: Engine, cases: Sequence[Dict[str, Any]], work: Path) -> List[Dict[str, Any]]:
    """The cells of one engine: each case, each of the engine's savers that could save it, each
    card, each tensor-parallel size the case runs at; with the environment a container of that
    card starts with."""
    cells = []
    sizes = tensor_parallel()
    for card in engine.cards:
        for case in cases:
            for saver, tp in ((s, tp) for s in engine.savers for tp in tp_sizes(case["name"], engine, sizes)):
                rec = record(case, saver)
                if not rec or rec.get("error"):
                    continue
                cid = cell_id(case["name"], saver, card, tp)
                slug = cid.replace("|", "-").replace("@", "_")
                env = dict(
                    COMMON_ENV,
                    PATH=f"{ROOT / engine.venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
                    HOME=os.environ.get("HOME", "/tmp"),
                    VLLM_CACHE_ROOT=vllm_cache(engine.venv),
                    MODEL_DIR=str(model_dir(case, saver) / "model"),
                    COMPAT_CARD=card,
                    COMPAT_WORK_DIR=str(work / "run" / slug),
                )
                Path(env["COMPAT_WORK_DIR"]).mkdir(parents=True, exist_ok=True)
                cells.append(
                    {
                        "id": cid,
                        "key": (case["name"], rec["transformers"], card, tp),
                        # Taken before the run: the code the cell runs, not what the tree holds after.
                        "fingerprint": fingerprint(case, saver, engine, card, tp),
                        "card": card,
                        "saver": saver,
                        "tp": tp,
                        "model": env["MODEL_DIR"],
                        "args": list(PLATFORM_ARGS) + list(engine.serve_args) + list(tp_args(tp)),
                        "prompt": rec["prompt"],
                        "count": len(rec["reference"]),
                        "log": str(work / "logs" / f"{slug}.log"),
                        "env": env,
                    }
                )
    return cells


def run_engine(
    engine: Engine, cells: List[Dict[str, Any]], work: Path, progress: Any, core: Optional[int] = None, tp: int = 1
) -> Dict[str, Dict[str, Any]]:
    """The worker's result of every cell, by id (cells of one tensor-parallel size `tp`). `core`:
    the one CPU this worker's engines use, every rank of a start bound to it (workers side by
    side each get their own; the engines' OpenMP threads spin, and two of them on one core slow
    both several times over)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    name = engine.vllm + (f"-tp{tp}" if tp > 1 else "")
    spec = work / f"cells-{name}.json"
    out = work / f"results-{name}.jsonl"
    pin = pin_env([core], ranks=tp) if core is not None else {}
    if core is None and tp > 1:
        pin = {"VLLM_CPU_OMP_THREADS_BIND": rank_binds("all", tp)}
    spec.write_text(json.dumps({"cells": cells, "pin": pin}))
    env = dict(os.environ, **COMMON_ENV)
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "COMPAT_ENGINE_PYTHON"):
        env.pop(key, None)
    with open(work / f"worker-{name}.log", "w") as log:
        proc = subprocess.Popen(
            [str(engine.python), "-m", WORKER, str(spec), str(out)], cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("conformance: "):
                progress(f"vLLM {engine.vllm}{f' TP {tp}' if tp > 1 else ''}: {line[len('conformance: ') :].strip()}")
        proc.wait()
    results = {}
    if out.exists():
        for line in out.read_text().splitlines():
            result = json.loads(line)
            results[result["id"]] = result
    for cell in cells:  # a worker that died takes its remaining cells with it: say so per cell
        results.setdefault(
            cell["id"],
            {"id": cell["id"], "outcome": "error", "error": f"the vLLM {engine.vllm} worker ended first (exit {proc.returncode})"},
        )
    return results


def cause(error: str, log: Path) -> Tuple[Optional[str], Optional[str]]:
    """(triage's code, the line that says why) for a cell that did not answer: from the exception
    the engine raised, else from its whole log (where the reason may come before the refusal: a
    failed model inspection's own error, 0.11's fallback from its V1 engine for windows on the CPU)."""
    hit = scan([error.encode("utf-8", errors="replace")], signatures())
    if hit is None:
        hit = scan([_engine_lines(log)], signatures())
    if hit is not None:
        return hit[0].code, hit[1]
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    # pydantic puts the reason on its second line ("Value error, ..."); others on the first.
    line = next((x for x in lines if x.startswith("Value error,")), lines[0] if lines else None)
    return None, line


def _engine_lines(log: Path) -> bytes:
    """The cell's log without the launcher's own lines: those quote what the committed cells say
    (C1 names a cell's cause), and a cause read back from them would be the last run's, nested one
    level deeper at each run, not this one's."""
    try:
        text = log.read_bytes()
    except OSError:
        return b""
    return b"\n".join(line for line in text.splitlines() if not line.lstrip().startswith(LAUNCHER_PREFIX))


LOG_PREFIX = re.compile(r"\((?:\w+) pid=\d+\)\s*|(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s*")
# An engine that names the model's directory names it in the saved models' cache.
PATHS = re.compile(r"/\S*?site-packages/|" + re.escape(str(ROOT)) + "/|" + re.escape(str(CACHE)) + "/")


def quoted(line: Optional[str]) -> Optional[str]:
    """A log line fit for results.json: no process ids, times or paths of this machine."""
    return PATHS.sub("", LOG_PREFIX.sub("", line)).strip()[:200] if line else None


def classify(result: Dict[str, Any], reference: List[int], log: Path) -> Dict[str, Any]:
    """The cell's `result` and `code` from the worker's outcome."""
    outcome = result.get("outcome")
    if outcome == "answered":
        return {"result": "exact" if result.get("tokens") == reference else "differs", "code": None}
    if outcome in ("refused", "crashed"):
        code, why = cause(result.get("error") or "", log)
        out = {"result": outcome, "code": code, "cause": quoted(why)}
        if result.get("signal"):
            out["signal"] = result["signal"]
        return out
    return {"result": "error", "code": None, "cause": quoted(result.get("error"))}


def log_digest(log: Path) -> Optional[str]:
    """sha256 of a cell's whole log (None where it left none): which run a result came from."""
    try:
        return hashlib.sha256(log.read_bytes()).hexdigest()
    except OSError:
        return None


def max_model_len_of(args: List[str]) -> Optional[str]:
    return UserArgs(args).value("--max-model-len")


def first_difference(got: Optional[List[int]], want: List[int]) -> Optional[int]:
    if got is None:
        return None
    return next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None if len(got) == len(want) else min(len(got), len(want))
    )


def doctor_verdicts(card: str, models: List[str], progress: Any, tp: int = 1) -> Dict[str, str]:
    """doctor's verdict on each model for `card`, with the platform's arguments at tensor-parallel
    size `tp`, verified by the card's engine (one doctor process for all of them)."""
    if not models:
        return {}
    cmd = [sys.executable, "-m", "common", "doctor", *models, "--card", card, "--json", "--", *PLATFORM_ARGS, *tp_args(tp)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1800)
    try:
        rows = json.loads(proc.stdout)["rows"]
    except (ValueError, KeyError):
        progress(f"doctor on {card} gave no table: {proc.stderr[-500:]}")
        return {}
    return {row["model"]: row["verdict"] for row in rows if row["card"] == card}


def run_cells(
    cases: Sequence[Dict[str, Any]],
    engines: Sequence[Engine],
    jobs: int = 2,
    keep: bool = False,
    progress: Any = None,
    only: Optional[Any] = None,
) -> List[Dict[str, Any]]:
    """Run the cells of `cases` on `engines` (those `only(cell)` keeps, when given) and return
    them classified, each with its model directory (`model`). Writes nothing but logs."""
    progress = progress or _stderr
    missing = [e for e in engines if not e.available()]
    if missing:
        raise SystemExit("conformance: missing engine venvs: " + ", ".join(f"{e.venv} (make {e.make_target})" for e in missing))
    ensure(cases, sorted({s for e in engines for s in e.savers}))
    work = Path(tempfile.mkdtemp(prefix="conformance-"))
    try:
        # One worker per engine and tensor-parallel size: a size's ranks are bound per worker.
        planned: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
        for e in engines:
            for c in plan_cells(e, cases, work):
                if only is None or only(c):
                    planned.setdefault((e.vllm, c["tp"]), []).append(c)
        # The cores this process may use (a test worker of `make test` has its own share).
        available = sorted(os.sched_getaffinity(0))
        jobs = max(1, min(jobs, len(available)))
        pin = jobs > 1 or len(available) < (os.cpu_count() or len(available))
        progress(f"conformance: {sum(len(c) for c in planned.values())} cells on {len(planned)} engine workers, {jobs} side by side")
        cores: queue.Queue[int] = queue.Queue()
        for core in available[:jobs]:
            cores.put(core)

        def on_a_core(group: Tuple[str, int]) -> Dict[str, Dict[str, Any]]:
            core = cores.get()
            try:
                return run_engine(ENGINES[group[0]], planned[group], work, progress, core if pin else None, group[1])
            finally:
                cores.put(core)

        # The engine with the most cells first, so that the others fill the cores beside it.
        order = sorted(planned, key=lambda v: -len(planned[v]))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {v: pool.submit(on_a_core, v) for v in order}
            outcomes = {v: f.result() for v, f in futures.items()}
        return collect(cases, planned, outcomes, work)
    finally:
        if keep:
            progress(f"conformance: logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def select_cases(case_names: Optional[Iterable[str]] = None) -> List[Dict[str, Any]]:
    cases = load_cases()
    if not case_names:
        return cases
    wanted = set(case_names)
    unknown = wanted - {c["name"] for c in cases}
    if unknown:
        raise SystemExit(f"conformance: no case named {', '.join(sorted(unknown))}")
    return [c for c in cases if c["name"] in wanted]


def run(
    case_names: Optional[Iterable[str]] = None,
    engine_names: Optional[Iterable[str]] = None,
    jobs: int = 2,
    keep: bool = False,
    progress: Any = None,
    everything: bool = False,
) -> Dict[str, Any]:
    """Run the chosen cells, merge them into results.json, bake the cells doctor reads, let doctor
    judge every model on every card, and write the README table. Chosen: the cells of the named
    cases and engines; with no names, the cells not yet run or whose fingerprint no longer
    matches the code (every cell with `everything`)."""
    from .report import write_readme

    progress = progress or _stderr
    started = time.monotonic()
    engines = [ENGINES[v] for v in (engine_names or ENGINES)]
    whole = everything and not case_names and not engine_names
    only = None
    if not case_names and not engine_names and not everything:
        committed = committed_fingerprints()
        only = lambda cell: committed.get(cell["key"]) != cell["fingerprint"]  # noqa: E731
    cells_run = run_cells(select_cases(case_names), engines, jobs, keep, progress, only)
    elapsed = time.monotonic() - started
    results = merge(cells_run, engines)
    results["last_run"] = {"cells": len(cells_run), "seconds": round(elapsed, 1), "jobs": jobs}
    if whole:  # the whole matrix: the figure make bench reports
        results["full_run"] = results["last_run"]
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")  # the engine's answers kept, whatever judging does
    judge_all(results, progress)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_readme(results)
    return results


def committed_fingerprints(path: Path = RESULTS) -> Dict[Tuple[str, str, str, int], Optional[str]]:
    """(case, saved_by, card, tp) -> the fingerprint of the committed cell (None: it has none)."""
    cells = json.loads(path.read_text()).get("cells", []) if path.exists() else []
    return {cell_key(c): c.get("fingerprint") for c in cells}


def stale(results: Dict[str, Any]) -> List[str]:
    """The committed cells that do not prove the code as it is: a fingerprint that no longer
    matches (or none), a case or card gone, a case with no cell on an engine. Reads no model and
    starts nothing: what `make test` checks. A fingerprint hashes what each venv holds: a venv not
    built here is named first, its cells' fingerprints cannot match."""
    from .fingerprint import installed

    cases = {c["name"]: c for c in load_cases()}
    engine_of = {card: e for e in ENGINES.values() for card in e.cards}
    venvs = sorted({e.venv for e in ENGINES.values()} | {s.venv for s in SAVERS.values()})
    unbuilt = [v for v in venvs if installed(v) == "not built"]
    if unbuilt:
        return [f"{', '.join(unbuilt)} not built here (make envs): every cell's fingerprint hashes what its venvs hold"]
    sizes = tensor_parallel()
    out = []
    ran = set()
    for cell in results.get("cells", []):
        name, saved_by, card, tp = cell_key(cell)
        case, engine = cases.get(name), engine_of.get(card)
        where = f"{name} saved by {saved_by} on {card}" + (f" at TP {tp}" if tp > 1 else "")
        if case is None or engine is None:
            out.append(f"{where}: its {'case' if case is None else 'card'} is gone")
            continue
        if tp not in tp_sizes(name, engine, sizes):
            out.append(f"{where}: cases.toml's [tensor_parallel] no longer runs it at that size")
            continue
        ran.add((name, engine.vllm, tp))
        saver = {v: s for s, v in results.get("models", {}).get(name, {}).items()}.get(saved_by)
        if saver is None:
            out.append(f"{where}: no saver of the case is transformers {saved_by}")
        elif cell.get("fingerprint") != fingerprint(case, saver, engine, card, tp):
            out.append(f"{where}: {'its code changed' if cell.get('fingerprint') else 'no fingerprint'}")
    out += [
        f"{n} on vLLM {e.vllm}" + (f" at TP {tp}" if tp > 1 else "") + ": no cell yet"
        for n in cases
        for e in ENGINES.values()
        for tp in tp_sizes(n, e, sizes)
        if (n, e.vllm, tp) not in ran
    ]
    if results.get("judged_with") != doctor_fingerprint():
        out.append("doctor's verdicts on the cells: judged by other code (`python -m conformance judge` judges them again, no engine runs)")
    return out


def judge_all(results: Dict[str, Any], progress: Any) -> None:
    """Every cell's traits read again from its saved config (config_traits may have learned a
    trait since it ran), the cells doctor reads baked from them, then doctor's verdict on every
    cell's model and card."""
    from .report import write_baked

    cases = {c["name"]: c for c in load_cases()}
    ensure(list(cases.values()), sorted({s for e in ENGINES.values() for s in e.savers}))
    # Which transformers saved each case (or why one could not): what the cells must cover.
    results["models"] = {
        name: {
            s: record(case, s).get("transformers") if not record(case, s).get("error") else f"no save: {record(case, s)['error'][:120]}"
            for s in SAVERS
        }
        for name, case in cases.items()
    }
    by_start: Dict[Tuple[str, int], Dict[str, List[Dict[str, Any]]]] = {}
    args = {e.vllm: list(PLATFORM_ARGS) + list(e.serve_args) for e in ENGINES.values()}
    for cell in results["cells"]:
        saver = next(s for s in SAVERS.values() if record(cases[cell["variant"]], s.name).get("transformers") == cell["saved_by"])
        model = str(model_dir(cases[cell["variant"]], saver.name) / "model")
        config = json.loads((Path(model) / "config.json").read_text())
        cell["traits"] = config_traits(config, max_model_len_of(args[cell["vllm"]]))
        cell["tp"] = int(cell.get("tp") or 1)
        cell["values"] = cell_values(config, cell["vllm"], cell["architecture"], cell["tp"], args[cell["vllm"]])
        cell.pop("sharding", None)
        if cell["tp"] > 1:
            cell["sharding"] = sharding(config, cell["tp"])
        by_start.setdefault((cell["card"], cell["tp"]), {}).setdefault(model, []).append(cell)
    write_baked(results)
    progress("conformance: doctor on every model and card")
    results["judged_with"] = doctor_fingerprint()  # taken before: the code that judges
    for (card, tp), models in by_start.items():
        verdicts = doctor_verdicts(card, sorted(models), progress, tp)
        for model, cells in models.items():
            for cell in cells:
                cell["doctor"] = verdicts.get(model)


def collect(
    cases: Sequence[Dict[str, Any]],
    planned: Dict[Tuple[str, int], List[Dict[str, Any]]],
    outcomes: Dict[Tuple[str, int], Dict[str, Dict[str, Any]]],
    work: Path,
) -> List[Dict[str, Any]]:
    by_name = {c["name"]: c for c in cases}
    out = []
    for (vllm, _), cells in planned.items():
        for cell in cells:
            name, saver, card = cell["id"].split("|")[:3]
            case = by_name[name]
            rec = record(case, saver)
            # The reference is the author's (transformers 5) for every save of the case: the
            # same weights, whoever saved them.
            reference = record(case, AUTHOR.name)["reference"]
            result = outcomes[vllm, cell["tp"]][cell["id"]]
            row = {
                "id": cell["id"],
                "architecture": case["architecture"],
                "variant": name,
                "card": card,
                "vllm": vllm,
                "saved_by": rec["transformers"],
                "tp": cell["tp"],
            }
            row.update(classify(result, reference, Path(cell["log"])))
            if rec["reference"] != reference:
                # This transformers computes the same weights otherwise (its YaRN, say): noted, and
                # the engine is held to the author's.
                row["saver_disagrees_with_author"] = True
            row["repairs"] = (result.get("plan") or {}).get("repairs") or []
            if row["result"] == "differs":
                row["first_difference"] = first_difference(result.get("tokens"), reference)
            if result.get("same_start_as"):
                row["same_start_as"] = result["same_start_as"]
            # What ran, kept so that anyone can re-check it (python -m conformance verify): the
            # reference and served ids, a digest of the cell's log, when it ran and how long.
            row["reference"] = list(reference)
            row["served"] = result.get("tokens") if result.get("outcome") == "answered" else None
            row["log_sha256"] = log_digest(Path(cell["log"]))
            row["ran_at"] = result.get("ran_at")
            row["seconds"] = result.get("seconds")
            row["fingerprint"] = cell["fingerprint"]
            config = json.loads((Path(cell["model"]) / "config.json").read_text())
            row["traits"] = config_traits(config, max_model_len_of(cell["args"]))
            row["values"] = cell_values(config, vllm, case["architecture"], cell["tp"], cell["args"])
            row["model"] = cell["model"]
            out.append(row)
    # A cell that made the very same start as another (its log holds only the plan) has that
    # cell's cause too.
    by_id = {row.pop("id"): row for row in out}
    for row in out:
        same = by_id.get(row.get("same_start_as", ""))
        if same is not None:
            row.update({k: same[k] for k in ("code", "cause", "signal", "served", "log_sha256") if k in same})
    return out


def merge(cells: List[Dict[str, Any]], engines: Sequence[Engine]) -> Dict[str, Any]:
    """results.json with `cells` replacing the cells of the same case, saver and card."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cells": []}
    key = cell_key
    cells = [{k: v for k, v in c.items() if k != "model"} for c in cells]  # a path of this machine's cache
    fresh = {key(c) for c in cells}
    kept = [c for c in old.get("cells", []) if key(c) not in fresh]
    names = [c["name"] for c in load_cases()]
    order = {n: i for i, n in enumerate(names)}
    merged = sorted(kept + cells, key=lambda c: (order.get(c["variant"], len(order)), c["card"], c["saved_by"], int(c.get("tp") or 1)))
    engines_seen = dict(old.get("engines", {}))
    kept_figures = {k: old[k] for k in ("full_run", "models") if k in old}
    for engine in engines:
        engines_seen[engine.vllm] = {
            "cards": list(engine.cards),
            "savers": list(engine.savers),
            "serve_args": list(PLATFORM_ARGS) + list(engine.serve_args),
        }
    return {"engines": engines_seen, **kept_figures, "cells": merged}
