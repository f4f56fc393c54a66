"""Every test's seconds: this run's (build/test-durations.json, slowest first) and the ones the
next run orders its work by.

`make test` hands the suite's scopes (conftest.py `_scope`: the image tier and each other
module) to two workers, each taking the next as it frees up. A
scope of 80 s that comes last runs alone on one worker while the other has nothing left: the
order that ends both workers together is the longest first. A scope's length is what its tests
took in the runs before (kept in the project's cache, outside the checkout, so that a fresh
clone on the same machine has them, and merged, so that a run of one tier does not forget the
others). A machine that has run none (CI's, every time) takes the committed figures of the slow
tests (SEED_FILE, a full run's on two cores: `python -m tests.durations --seed` writes it again
from build/); a scope neither knows counts as its engine starts at START_SECONDS each. The
figures only order the work: no test is skipped or judged by them. Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterable, Mapping

from compat_build import cache

ROOT = Path(__file__).resolve().parents[1]
RUN_FILE = ROOT / "build" / "test-durations.json"
SEED_FILE = ROOT / "tests" / "durations_seed.json"
# The tests the seed keeps: those that move the order (the rest are short enough to fill in).
SEED_MIN_SECONDS = 2.0
# What an engine start costs on two cores (an interpreter, torch, vLLM, a model build): the
# weight of a scope whose tests no run on this machine has timed yet.
START_SECONDS = 15.0


def cache_file() -> Path:
    return Path(cache.root()) / "test-durations.json"


def _read(path: Path) -> Dict[str, float]:
    try:
        tests = json.loads(path.read_text(encoding="utf-8")).get("tests", {})
    except (OSError, ValueError, AttributeError):
        return {}
    if not isinstance(tests, dict):
        return {}
    return {k: float(v) for k, v in tests.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}


def known() -> Dict[str, float]:
    """Each test's seconds in the latest run that ran it on this machine, or the seed's where
    this machine has run none."""
    return _read(cache_file()) or _read(SEED_FILE)


# The file of the figures this run orders by, read once by the run's own process and named to its
# pytest-xdist workers (they inherit the variable): a run that ends in another terminal while the
# workers collect must not give them two orders, which pytest-xdist refuses.
SNAPSHOT_VARIABLE = "COMPAT_TEST_SECONDS_FILE"
_held: Dict[str, str] = {}  # the file this process made, removed by it alone


def hold_for_run() -> None:
    """Keep today's figures for this run and its workers (the run's own process, at its start)."""
    if os.environ.get(SNAPSHOT_VARIABLE):
        return
    try:
        fd, path = tempfile.mkstemp(prefix="enginex-compat-test-seconds-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"tests": known()}, fh)
    except OSError as exc:  # then each process reads the cache itself, as a run without workers does
        print(f"durations: cannot keep this run's figures: {exc}", file=sys.stderr)
        return
    os.environ[SNAPSHOT_VARIABLE] = _held["path"] = path


def for_this_run() -> Dict[str, float]:
    """The figures this run orders by: those held at its start, else today's."""
    path = os.environ.get(SNAPSHOT_VARIABLE)
    return _read(Path(path)) if path else known()


def release() -> None:
    """Remove the file `hold_for_run` made here (a run started inside another keeps its parent's)."""
    path = _held.pop("path", None)
    if path:
        os.environ.pop(SNAPSHOT_VARIABLE, None)
        try:
            os.unlink(path)
        except OSError:
            pass


def scope_seconds(scope_tests: Mapping[str, Iterable[str]], starts: Mapping[str, int], seen: Mapping[str, float]) -> Dict[str, float]:
    """Each scope's expected seconds: its tests' known seconds, or its engine starts' cost when
    none of its tests has been timed."""
    out = {}
    for scope, tests in scope_tests.items():
        timed = [seen[t] for t in tests if t in seen]
        out[scope] = sum(timed) if timed else starts.get(scope, 0) * START_SECONDS
    return out


def _write(path: Path, tests: Mapping[str, float]) -> None:
    slowest = sorted(tests.items(), key=lambda item: -item[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"seconds": round(sum(tests.values()), 2), "tests": {k: round(v, 3) for k, v in slowest}}, indent=1) + "\n")
    os.replace(tmp, path)


def save(durations: Mapping[str, float]) -> None:
    """This run's seconds to build/ (as they are) and merged into the cache's (for the next
    run's order). A file that cannot be written is said and left: the run's result stands."""
    for path, tests in ((RUN_FILE, dict(durations)), (cache_file(), {**known(), **durations})):
        try:
            _write(path, tests)
        except OSError as exc:  # a read-only checkout or cache still runs its tests
            print(f"durations: cannot write {path}: {exc}", file=sys.stderr)


def write_seed() -> int:
    """SEED_FILE from build/test-durations.json (a full run's), its slow tests only."""
    tests = _read(RUN_FILE)
    if not tests:
        print(f"durations: no figures in {RUN_FILE}: run `make test` first", file=sys.stderr)
        return 1
    _write(SEED_FILE, {k: round(v) for k, v in tests.items() if v >= SEED_MIN_SECONDS})
    print(
        f"durations: {SEED_FILE.relative_to(ROOT)} holds the {sum(v >= SEED_MIN_SECONDS for v in tests.values())} tests of {SEED_MIN_SECONDS:g} s or more"
    )
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--seed"]:
        sys.exit("usage: python -m tests.durations --seed")
    sys.exit(write_seed())
