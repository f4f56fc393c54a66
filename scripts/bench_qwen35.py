"""make bench: Qwen3.5's backport against a dense backport of the same size, on vLLM 0.5.5's CPU build.

qwen35_decode_vs_dense_backport   decode tokens per second of a tiny Qwen3.5 (three Gated DeltaNet
                                  layers, one gated attention layer) / those of a tiny Qwen3 with
                                  the same hidden size, heads, MLP and four attention layers, both
                                  served through the iluvatar-bi100 launcher (the image's backports)

Both engines run side by side, measured as bench_decode.py says (four requests at once, a short
prompt, 64 greedy tokens each; the median of five rounds' ratios).
Needs .venv-engine055 and .venv-author (`make envs`).
"""

import statistics
import sys
import tempfile
from pathlib import Path

from bench_decode import ENGINE_055, ROUNDS, decode_rate, start
from harness.fixtures.factory import build


def main() -> int:
    if not ENGINE_055.available():
        print("qwen35_decode_vs_dense_backport: skipped (needs .venv-engine055: make envs)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        hybrid = build("v5", "generic", base / "qwen3.5", "--model-type", "qwen3_5")
        dense = build("v5", "generic", base / "qwen3", "--model-type", "qwen3", "--layers", "4")
        servers = {}
        try:
            for name, model in (("hybrid", hybrid), ("dense", dense)):
                servers[name] = (start(model, base / f"work-{name}", base / f"{name}.log"), model)
            for server, model in servers.values():
                decode_rate(server, model)  # warm-up
            ratios = []
            for _ in range(ROUNDS):
                rates = {name: decode_rate(server, model) for name, (server, model) in servers.items()}
                ratios.append(rates["hybrid"] / rates["dense"])
        finally:
            for server, _ in servers.values():
                server.stop()
    print(f"qwen35_decode_vs_dense_backport: {statistics.median(ratios):.2f}  (rounds: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
