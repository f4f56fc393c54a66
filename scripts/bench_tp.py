"""make bench: tensor parallelism of a backport on vLLM 0.5.5's CPU build (the BI-100's engine generation).

tp2_decode_vs_tp1   decode tokens per second of a tiny Qwen3 (the image's backport) served through
                    the iluvatar-bi100 launcher with --tensor-parallel-size 2 / those of the same
                    model at size 1 (two ranks over gloo, each on half the heads and half the MLP),
                    on the same two cores: a rank on each, or one rank's threads on both

Both engines run side by side, measured as bench_decode.py says (four requests at once, a short
prompt, 64 greedy tokens each; the median of five rounds' ratios). The two answer the same greedy
tokens (else the figure would compare different work, and it says so).
Needs .venv-engine055 and .venv-author (`make envs`).
"""

import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Dict

from bench_decode import ENGINE_055, ROUNDS, decode_rate, greedy, start
from harness.cores import bind_string
from harness.fixtures.factory import build


def binding(tp: int) -> Dict[str, str]:
    """The same two cores for either start: one rank's threads on both, or a rank on each (vLLM's
    CPU workers bind their OpenMP threads per rank; unbound, two ranks' threads would each spin
    on both cores)."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": bind_string(cores) if tp == 1 else "|".join(map(str, cores)), "OMP_NUM_THREADS": str(3 - tp)}


def main() -> int:
    if not ENGINE_055.available():
        print("tp2_decode_vs_tp1: skipped (needs .venv-engine055: make envs)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        model = build("v5", "generic", base / "qwen3", "--model-type", "qwen3", "--layers", "4")
        servers = {}
        try:
            for tp in (1, 2):
                servers[tp] = start(model, base / f"work-tp{tp}", base / f"tp{tp}.log", "--tensor-parallel-size", str(tp), env=binding(tp))
            answers = {tp: greedy(server, model) for tp, server in servers.items()}
            if answers[1] != answers[2]:
                print("tp2_decode_vs_tp1: not measured: TP 2 answered other greedy tokens than TP 1")
                return 1
            ratios = []
            for _ in range(ROUNDS):
                rates = {tp: decode_rate(server, model) for tp, server in servers.items()}
                ratios.append(rates[2] / rates[1])
        finally:
            for server in servers.values():
                server.stop()
    print(f"tp2_decode_vs_tp1: {statistics.median(ratios):.2f}  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
