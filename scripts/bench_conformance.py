"""make bench: how fast the conformance matrix runs its cells, measured side by side in one run.

conformance_cells_per_min              cells per minute of one engine worker that imports vLLM once
                                       and forks a child per cell (vLLM 0.5.5, BENCH_CONFORMANCE_CASES
                                       cases x its two savers, one core)
conformance_fresh_cells_per_min        the same cells, each in a worker of its own (an interpreter that
                                       imports vLLM per cell: the least one `vllm serve` per cell pays)
conformance_forked_vs_fresh            the ratio of the two (goal >= 2)
conformance_full_matrix_min            the last full `make conformance` (conformance/results.json):
                                       every cell on every engine, engines side by side

Needs .venv-engine055 and .venv-author (`make envs`); the case models are made once and cached.
"""

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance.cases import ENGINES, load_cases  # noqa: E402
from conformance.matrix import RESULTS, run_cells  # noqa: E402

CASES = ("llama2", "llama3.1", "qwen2", "qwen3", "gemma", "gpt2", "opt", "falcon-7b")


def main() -> int:
    engine = ENGINES["0.5.5"]
    if not engine.available():
        print("conformance_*: skipped (needs .venv-engine055: make envs)")
        return 0
    wanted = os.environ.get("BENCH_CONFORMANCE_CASES", ",".join(CASES)).split(",")
    cases = [c for c in load_cases() if c["name"] in wanted]
    quiet = lambda text: None  # noqa: E731
    unsharded = lambda cell: cell["tp"] == 1  # noqa: E731  (the figure is of one-rank cells)
    run_cells(cases, [engine], jobs=1, progress=quiet, only=unsharded)  # models made and the engine's caches warm
    start = time.monotonic()
    forked = run_cells(cases, [engine], jobs=1, progress=quiet, only=unsharded)
    forked_s = time.monotonic() - start
    start = time.monotonic()
    fresh = []
    for case in cases:
        for saver in engine.savers:  # a cell's saver key (its results name the saver's version)
            fresh += run_cells([case], [engine], jobs=1, progress=quiet, only=lambda cell, s=saver: cell["saver"] == s and unsharded(cell))
    fresh_s = time.monotonic() - start
    outcome = lambda cells: sorted((c["variant"], c["saved_by"], c["result"]) for c in cells)  # noqa: E731
    assert fresh and outcome(fresh) == outcome(forked), "the two ways disagree"
    per_min = len(forked) * 60 / forked_s
    fresh_per_min = len(fresh) * 60 / fresh_s
    print(f"conformance_cells: {len(forked)}")
    print(f"conformance_cells_per_min: {per_min:.1f}")
    print(f"conformance_fresh_cells_per_min: {fresh_per_min:.1f}")
    print(f"conformance_forked_vs_fresh: {per_min / fresh_per_min:.2f}")
    if RESULTS.exists():
        last = json.loads(RESULTS.read_text()).get("full_run") or {}
        if last.get("cells"):
            print(f"conformance_full_matrix_min: {last['seconds'] / 60:.1f} ({last['cells']} cells, {last['jobs']} workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
