"""Run the conformance matrix: every case on every card's engine, through that card's launcher.

For each engine generation (conformance/cases.py ENGINES) one worker process in the engine's
venv runs the cells of its cards (conformance/engine_worker.py); engines run side by side as
cores allow. Each answered cell is compared with its saver's reference: `exact` or `differs`;
a start that failed is `refused`, a first request that failed is `crashed`, each with the code
triage gives its log. Then doctor judges every model on every card (one doctor process per
card, verified with that card's engine), and the cell records its verdict.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from common.triage import triage_file
from tests.engine import COMMON_ENV

from .cases import ENGINES, PLATFORM_ARGS, ROOT, Engine, load_cases
from .models import ensure, model_dir, record

RESULTS = Path(__file__).resolve().parent / "results.json"
WORKER = "conformance.engine_worker"


def cell_id(case: str, saver: str, card: str) -> str:
    return f"{case}|{saver}|{card}"


def plan_cells(engine: Engine, cases: Sequence[Dict[str, Any]], work: Path) -> List[Dict[str, Any]]:
    """The cells of one engine: each case, each of the engine's savers that could save it, each
    card; with the environment a container of that card starts with."""
    cells = []
    for card in engine.cards:
        for case in cases:
            for saver in engine.savers:
                rec = record(case, saver)
                if not rec or rec.get("error"):
                    continue
                cid = cell_id(case["name"], saver, card)
                slug = cid.replace("|", "-").replace("@", "_")
                env = dict(
                    COMMON_ENV,
                    PATH=f"{ROOT / engine.venv / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
                    HOME=os.environ.get("HOME", "/tmp"),
                    MODEL_DIR=str(model_dir(case, saver) / "model"),
                    COMPAT_CARD=card,
                    COMPAT_WORK_DIR=str(work / "run" / slug),
                )
                Path(env["COMPAT_WORK_DIR"]).mkdir(parents=True, exist_ok=True)
                cells.append(
                    {
                        "id": cid,
                        "card": card,
                        "model": env["MODEL_DIR"],
                        "args": list(PLATFORM_ARGS) + list(engine.serve_args),
                        "prompt": rec["prompt"],
                        "count": len(rec["reference"]),
                        "log": str(work / "logs" / f"{slug}.log"),
                        "env": env,
                    }
                )
    return cells


def run_engine(engine: Engine, cells: List[Dict[str, Any]], work: Path, progress: Any, core: Optional[int] = None) -> Dict[str, Dict[str, Any]]:
    """The worker's result of every cell, by id. `core`: the one CPU this worker's engines use
    (workers side by side each get their own; the engines' OpenMP threads spin, and two of them
    on one core slow both several times over)."""
    (work / "logs").mkdir(parents=True, exist_ok=True)
    spec = work / f"cells-{engine.vllm}.json"
    out = work / f"results-{engine.vllm}.jsonl"
    pin = {} if core is None else {"VLLM_CPU_OMP_THREADS_BIND": str(core), "OMP_NUM_THREADS": "1"}
    spec.write_text(json.dumps({"cells": cells, "pin": pin}))
    env = dict(os.environ, **COMMON_ENV)
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "COMPAT_ENGINE_PYTHON"):
        env.pop(key, None)
    with open(work / f"worker-{engine.vllm}.log", "w") as log:
        proc = subprocess.Popen([str(engine.python), "-m", WORKER, str(spec), str(out)], cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("conformance: "):
                progress(f"vLLM {engine.vllm}: {line[len('conformance: '):].strip()}")
        proc.wait()
    results = {}
    if out.exists():
        for line in out.read_text().splitlines():
            result = json.loads(line)
            results[result["id"]] = result
    for cell in cells:  # a worker that died takes its remaining cells with it: say so per cell
        results.setdefault(cell["id"], {"id": cell["id"], "outcome": "error", "error": f"the vLLM {engine.vllm} worker ended first (exit {proc.returncode})"})
    return results


def classify(result: Dict[str, Any], reference: List[int], log: Path, card: str) -> Dict[str, Any]:
    """The cell's `result` and `code` from the worker's outcome."""
    outcome = result.get("outcome")
    if outcome == "answered":
        return {"result": "exact" if result.get("tokens") == reference else "differs", "code": None}
    if outcome in ("refused", "crashed"):
        code = triage_file(str(log), card).code if log.exists() else None
        return {"result": outcome, "code": code if code != "unknown" else None}
    return {"result": "error", "code": None}


def first_difference(got: Optional[List[int]], want: List[int]) -> Optional[int]:
    if got is None:
        return None
    return next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None if len(got) == len(want) else min(len(got), len(want)))


def doctor_verdicts(card: str, models: List[str], progress: Any) -> Dict[str, str]:
    """doctor's verdict on each model for `card`, with the platform's arguments, verified by the
    card's engine (one doctor process for all of them)."""
    if not models:
        return {}
    cmd = [sys.executable, "-m", "common", "doctor", *models, "--card", card, "--json", "--", *PLATFORM_ARGS]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1800)
    try:
        rows = json.loads(proc.stdout)["rows"]
    except (ValueError, KeyError):
        progress(f"doctor on {card} gave no table: {proc.stderr[-500:]}")
        return {}
    return {row["model"]: row["verdict"] for row in rows}


def run(
    case_names: Optional[Iterable[str]] = None,
    engine_names: Optional[Iterable[str]] = None,
    jobs: int = 2,
    keep: bool = False,
    progress: Any = None,
) -> Dict[str, Any]:
    """Run the chosen cells (every one by default), merge them into results.json, return it."""
    progress = progress or (lambda text: print(text, file=sys.stderr, flush=True))
    cases = load_cases()
    if case_names:
        wanted = set(case_names)
        unknown = wanted - {c["name"] for c in cases}
        if unknown:
            raise SystemExit(f"conformance: no case named {', '.join(sorted(unknown))}")
        cases = [c for c in cases if c["name"] in wanted]
    engines = [ENGINES[v] for v in (engine_names or ENGINES)]
    missing = [e for e in engines if not e.available()]
    if missing:
        raise SystemExit("conformance: missing engine venvs: " + ", ".join(f"{e.venv} (make {e.make_target})" for e in missing))
    started = time.monotonic()
    progress(f"conformance: making {len(cases)} case models")
    ensure(cases, sorted({s for e in engines for s in e.savers}))
    work = Path(tempfile.mkdtemp(prefix="conformance-"))
    try:
        planned = {e.vllm: plan_cells(e, cases, work) for e in engines}
        progress(f"conformance: {sum(len(c) for c in planned.values())} cells on {len(engines)} engines, {jobs} side by side")
        cores: "queue.Queue[int]" = queue.Queue()
        for core in range(jobs):
            cores.put(core)

        def on_a_core(vllm: str) -> Dict[str, Dict[str, Any]]:
            core = cores.get()
            try:
                return run_engine(ENGINES[vllm], planned[vllm], work, progress, core if jobs > 1 else None)
            finally:
                cores.put(core)

        # The engine with the most cells first, so that the others fill the cores beside it.
        order = sorted(planned, key=lambda v: -len(planned[v]))
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = {v: pool.submit(on_a_core, v) for v in order}
            outcomes = {v: f.result() for v, f in futures.items()}
        cells_run = collect(cases, planned, outcomes, work)
        elapsed = time.monotonic() - started
        by_card: Dict[str, List[str]] = {}
        for cell in cells_run:
            by_card.setdefault(cell["card"], []).append(cell["model"])
        progress("conformance: doctor on every model and card")
        verdicts = {card: doctor_verdicts(card, sorted(set(models)), progress) for card, models in by_card.items()}
        for cell in cells_run:
            cell["doctor"] = verdicts.get(cell["card"], {}).get(cell.pop("model"))
        results = merge(cells_run, engines)
        results["last_run"] = {"cells": len(cells_run), "seconds": round(elapsed, 1), "jobs": jobs}
        RESULTS.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
        return results
    finally:
        if keep:
            progress(f"conformance: logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def collect(cases: Sequence[Dict[str, Any]], planned: Dict[str, List[Dict[str, Any]]], outcomes: Dict[str, Dict[str, Dict[str, Any]]], work: Path) -> List[Dict[str, Any]]:
    by_name = {c["name"]: c for c in cases}
    out = []
    for vllm, cells in planned.items():
        for cell in cells:
            name, saver, card = cell["id"].split("|")
            case = by_name[name]
            rec = record(case, saver)
            result = outcomes[vllm][cell["id"]]
            row = {
                "architecture": case["architecture"],
                "variant": name,
                "card": card,
                "vllm": vllm,
                "saved_by": rec["transformers"],
            }
            row.update(classify(result, rec["reference"], Path(cell["log"]), card))
            row["repairs"] = (result.get("plan") or {}).get("repairs") or []
            if row["result"] == "differs":
                row["first_difference"] = first_difference(result.get("tokens"), rec["reference"])
            if result.get("error"):
                row["error"] = result["error"][-300:]
            if result.get("same_start_as"):
                row["same_start_as"] = result["same_start_as"]
            row["seconds"] = result.get("seconds")
            row["model"] = cell["model"]
            out.append(row)
    return out


def merge(cells: List[Dict[str, Any]], engines: Sequence[Engine]) -> Dict[str, Any]:
    """results.json with `cells` replacing the cells of the same case, saver and card."""
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"cells": []}
    key = lambda c: (c["variant"], c["saved_by"], c["card"])  # noqa: E731
    fresh = {key(c) for c in cells}
    kept = [c for c in old.get("cells", []) if key(c) not in fresh]
    names = [c["name"] for c in load_cases()]
    order = {n: i for i, n in enumerate(names)}
    merged = sorted(kept + cells, key=lambda c: (order.get(c["variant"], len(order)), c["card"], c["saved_by"]))
    engines_seen = dict(old.get("engines", {}))
    for engine in engines:
        engines_seen[engine.vllm] = {"cards": list(engine.cards), "savers": list(engine.savers), "serve_args": list(PLATFORM_ARGS) + list(engine.serve_args)}
    return {"engines": engines_seen, "cells": merged}
