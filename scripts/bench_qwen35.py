"""make bench: Qwen3.5's backports against a model of the same size, on each engine generation's CPU build.

qwen35_decode_vs_dense_backport   decode tokens per second of a tiny Qwen3.5 (three Gated DeltaNet
                                  layers, one gated attention layer) / those of a tiny Qwen3 with
                                  the same hidden size, heads, MLP and four attention layers, both
                                  served through the iluvatar-bi100 launcher on vLLM 0.5.5 (the
                                  image's backports)
qwen35_v1_decode_vs_qwen3_next    decode tokens per second of a tiny Qwen3.5-MoE through the image's
                                  V1 backport / those of a tiny Qwen3-Next of the very same shape
                                  (its layers, experts and shared expert), the engine's own class,
                                  both served through the nv-a100 launcher on vLLM 0.11 (goal: at
                                  least 0.8). The backport runs the engine's own Qwen3-Next layers:
                                  what it costs is its projection layout and its own layer loop.
                                  Qwen3-Next's class requires experts, hence the MoE of Qwen3.5.
                                  On this CPU both run the engine venv's Gated DeltaNet stand-in
                                  (envs/engine/cpu_gated_delta.py) and --enforce-eager (the cells'
                                  way: torch.compile costs a minute a model here), alike.

Each pair runs side by side, measured as bench_decode.py says (four requests at once, a short
prompt, 64 greedy tokens each; the median of five rounds' ratios).
Needs .venv-engine055, .venv-engine and .venv-author (`make envs`); a pair whose engine venv is
missing is skipped, saying so.
"""

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Tuple

from bench_decode import ENGINE_055, ROUNDS, decode_rate, start
from harness.engine import ENGINE_0110
from harness.fixtures.factory import build


def ratio(pair: Dict[str, Tuple[Path, Dict[str, Any]]], base: Path) -> List[float]:
    """Each round's decode rate of pair["backport"] over pair["reference"], both started with
    their start() keywords."""
    base.mkdir(parents=True, exist_ok=True)
    servers = {}
    try:
        for name, (model, how) in pair.items():
            servers[name] = (start(model, base / f"work-{name}", base / f"{name}.log", *how.get("args", ()), **how.get("start", {})), model)
        for server, model in servers.values():
            decode_rate(server, model)  # warm-up
        rounds = []
        for _ in range(ROUNDS):
            rates = {name: decode_rate(server, model) for name, (server, model) in servers.items()}
            rounds.append(rates["backport"] / rates["reference"])
        return rounds
    finally:
        for server, _ in servers.values():
            server.stop()


def report(name: str, rounds: List[float]) -> None:
    print(f"{name}: {statistics.median(rounds):.2f}  (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        if ENGINE_055.available():
            hybrid = build("v5", "generic", base / "qwen3.5", "--model-type", "qwen3_5")
            dense = build("v5", "generic", base / "qwen3", "--model-type", "qwen3", "--layers", "4")
            report("qwen35_decode_vs_dense_backport", ratio({"backport": (hybrid, {}), "reference": (dense, {})}, base / "055"))
        else:
            print("qwen35_decode_vs_dense_backport: skipped (needs .venv-engine055: make envs)")
        if ENGINE_0110.available():
            on_011 = {"args": ("--enforce-eager",), "start": {"engine": ENGINE_0110, "card": "nv-a100"}}
            backport = build("v5", "generic", base / "qwen3.5-moe", "--model-type", "qwen3_5_moe")
            engine_own = build("v5", "generic", base / "qwen3-next", "--model-type", "qwen3_next")
            pair = {"backport": (backport, on_011), "reference": (engine_own, on_011)}
            report("qwen35_v1_decode_vs_qwen3_next", ratio(pair, base / "011"))
        else:
            print("qwen35_v1_decode_vs_qwen3_next: skipped (needs .venv-engine: make envs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
