"""A committed cell is a claim anyone can re-check: `python -m conformance verify`.

Two checks, each naming the cells that fail it:
- on every committed cell, without an engine: its result follows from the ids it keeps (exact
  where the served ids are the reference, differs where they are not, at the first difference it
  names; no served ids for a start that did not answer), and its reference is the author's
  greedy ids of the saved model (the saved models' records, where this machine has them). A result
  edited by hand, without the ids that make it, fails here;
- on the cells chosen (a rotating sample by seed, or the cells of named cases and engines): the
  cell run again on its engine, through its card's launcher, must come out as committed: the same
  result, the same code, the same served ids.
`make test` runs the first on every cell and the second on a sample of at least 20 cells outside
the ones the image changes (those it runs again anyway), from every engine generation, with a
seed of its own that its header prints.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from .cases import AUTHOR, ENGINES, load_cases
from .image_changes import image_change_cells
from .matrix import cell_id, cell_key, first_difference, run_cells, select_cases
from .models import record

# What a cell run again must reproduce of the committed one.
REPRODUCED = ("result", "code", "served")
# The smallest sample `make test` verifies, and at least this many cells of each engine generation.
SAMPLE = 20
PER_ENGINE = 6


def name(cell: Dict[str, Any]) -> str:
    tp = int(cell.get("tp") or 1)
    return f"{cell['variant']} saved by {cell['saved_by']} on {cell['card']}" + (f" at TP {tp}" if tp > 1 else "")


def inconsistent(cell: Dict[str, Any], reference: Optional[List[int]] = None) -> Optional[str]:
    """Why the committed `cell` does not follow from the ids it keeps (None where it does);
    `reference`: the author's greedy ids of its saved model, where known here."""
    result, served, kept = cell.get("result"), cell.get("served"), cell.get("reference")
    if not isinstance(kept, list) or not kept:
        return "it keeps no reference ids"
    if reference is not None and kept != reference:
        return "its reference ids are not its saved model's author's"
    if result in ("exact", "differs"):
        if not isinstance(served, list):
            return f"it says {result} but keeps no served ids"
        if (served == kept) != (result == "exact"):
            return f"it says {result}, and its served ids are {'' if served == kept else 'not '}its reference's"
        if result == "differs" and cell.get("first_difference") != first_difference(served, kept):
            return "its first difference is not where its served ids part from the reference"
    elif served is not None:
        return f"it says {result} but keeps served ids"
    if not cell.get("log_sha256") or not cell.get("ran_at"):
        return "it keeps no digest of its log or no time it ran"
    return None


def check_committed(results: Dict[str, Any]) -> List[str]:
    """Every committed cell judged by itself (`inconsistent`), its reference against the saved
    model's record where this machine has saved it."""
    cases = {c["name"]: c for c in load_cases()}
    problems = []
    for cell in results["cells"]:
        case = cases.get(cell["variant"])
        known = record(case, AUTHOR.name).get("reference") if case is not None else None
        why = inconsistent(cell, known)
        if why:
            problems.append(f"{name(cell)}: {why}")
    return problems


def sample(results: Dict[str, Any], seed: int, count: int = SAMPLE, per_engine: int = PER_ENGINE) -> List[Dict[str, Any]]:
    """A rotating sample of committed cells, drawn by `seed`: at least `per_engine` cells of every
    engine generation, `count` in all, none of those `make test` runs again because the image
    changes their code path (tests/e2e/test_conformance.py), one cell per shared start."""
    skip = {cell_key(c) for c in image_change_cells(results)}
    pool = [c for c in results["cells"] if cell_key(c) not in skip and not c.get("same_start_as")]
    rng = random.Random(seed)
    picked: List[Dict[str, Any]] = []
    for vllm in sorted(ENGINES):
        mine = [c for c in pool if c["vllm"] == vllm]
        picked += rng.sample(mine, min(per_engine, len(mine)))
    rest = [c for c in pool if c not in picked]
    picked += rng.sample(rest, max(0, min(count - len(picked), len(rest))))
    return picked


def named(results: Dict[str, Any], cases: Iterable[str] = (), engines: Iterable[str] = ()) -> List[Dict[str, Any]]:
    """The committed cells of the named cases and engine generations (all of a kind not named)."""
    wanted_cases, wanted_engines = set(cases), set(engines)
    return [
        c
        for c in results["cells"]
        if (not wanted_cases or c["variant"] in wanted_cases) and (not wanted_engines or c["vllm"] in wanted_engines)
    ]


def rerun(results: Dict[str, Any], cells: Sequence[Dict[str, Any]], progress: Optional[Callable[[str], None]] = None) -> List[str]:
    """Run `cells` again and name each that does not come out as committed."""
    if not cells:
        return []
    saver_of = {(case, version): saver for case, saves in results["models"].items() for saver, version in saves.items()}
    keep = {cell_id(c["variant"], saver_of[c["variant"], c["saved_by"]], c["card"], int(c.get("tp") or 1)) for c in cells}
    engines = [ENGINES[v] for v in sorted({c["vllm"] for c in cells})]
    again = run_cells(select_cases(sorted({c["variant"] for c in cells})), engines, progress=progress, only=lambda cell: cell["id"] in keep)
    got = {cell_key(c): c for c in again}
    problems = []
    for cell in cells:
        new = got.get(cell_key(cell))
        if new is None:
            problems.append(f"{name(cell)}: not run again")
            continue
        moved = [f"{k} {cell.get(k)!r} -> {new.get(k)!r}" for k in REPRODUCED if new.get(k) != cell.get(k)]
        if moved:
            problems.append(f"{name(cell)}: {'; '.join(moved)}")
    return problems
