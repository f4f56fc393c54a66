"""The suite's engine starts, counted against the budget the repo states (tests/engine_starts.toml).

An engine start is the expensive thing of the suite: an interpreter, torch, vLLM's import and a
model build before the first token. Each is recorded where it happens, with the test that made it:
  server     a `vllm serve` or the image's launcher that execs it (harness/engine.py's Server)
  cell       a conformance cell (the matrix's worker builds an engine per cell)
  container  a container of a card image (its entrypoint: the launcher, the self-test, doctor)
  probe      a script in an engine's Python that imports vLLM (Engine.probe)
  host       a pre-imported engine (harness/engine_host.py) whose forks are the servers above:
             one per engine venv and pytest worker, its import paid once
At the end of a run every test module's count (hosts aside: one per engine venv and worker) is
held against its line of the budget: a module over its count, or one that starts engines without
a line, fails the run. A new slow path is
then a decision written in the budget file, not a drift. Standard library only.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path
from typing import Counter, Dict, Iterable, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
BUDGET_FILE = ROOT / "tests" / "engine_starts.toml"
KINDS = ("server", "cell", "container", "probe", "host")

# (test node id, kind) of every start this process made.
_STARTS: List[Tuple[str, str]] = []


def record(kind: str, count: int = 1) -> None:
    """One (or `count`) engine starts of `kind` by the test running now."""
    assert kind in KINDS, kind
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0] or "<outside a test>"
    _STARTS.extend([(test, kind)] * count)


def recorded() -> List[Tuple[str, str]]:
    return list(_STARTS)


def module_of(test: str) -> str:
    return test.split("::", 1)[0]


def by_module(starts: Iterable[Tuple[str, str]]) -> Dict[str, Counter[str]]:
    """Each module's starts by kind. A host is no module's: the first test of a worker to start
    an engine pays for it, whichever test that is (its bound is per worker: `host_problems`)."""
    out: Dict[str, Counter[str]] = collections.defaultdict(collections.Counter)
    for test, kind in starts:
        if kind != "host":
            out[module_of(test)][kind] += 1
    return dict(out)


def host_problems(starts: Iterable[Tuple[str, str]], workers: int, engines: int) -> List[str]:
    """A host is started once per engine venv and pytest worker, never more."""
    hosts = sum(1 for _, kind in starts if kind == "host")
    if hosts > workers * engines:
        return [f"{hosts} engine hosts started, more than one per engine ({engines}) and worker ({workers})"]
    return []


def load_budget(path: Path = BUDGET_FILE) -> Dict[str, int]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the engine 0.5.5 venv's Python 3.10 never reads it, but stays importable
        import tomli as tomllib
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    return {str(module): int(count) for module, count in data["modules"].items()}


def over_budget(starts: Iterable[Tuple[str, str]], budget: Dict[str, int]) -> List[str]:
    """One sentence per module whose starts exceed its budget or that has none."""
    problems = []
    for module, kinds in sorted(by_module(starts).items()):
        total = sum(kinds.values())
        allowed = budget.get(module)
        detail = ", ".join(f"{kinds[k]} {k}" for k in KINDS if kinds[k])
        if allowed is None:
            problems.append(f"{module} made {total} engine starts ({detail}) and has no line in {BUDGET_FILE.name}")
        elif total > allowed:
            problems.append(f"{module} made {total} engine starts ({detail}), over its budget of {allowed} in {BUDGET_FILE.name}")
    return problems


def summary(starts: Iterable[Tuple[str, str]], budget: Dict[str, int]) -> str:
    starts = list(starts)
    kinds = collections.Counter(kind for _, kind in starts)
    detail = ", ".join(f"{kinds[k]} {k}" for k in KINDS if kinds[k]) or "none"
    held = f"the modules' budget: {sum(budget.values())}"
    if kinds["host"]:  # held to their own bound (hosts), not a module's line
        held += f" (the {kinds['host']} hosts apart: at most one per engine venv and worker)"
    return f"engine starts: {len(starts)} ({detail}); {held}"
