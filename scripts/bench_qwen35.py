"""make bench: Qwen3.5's backport against a dense backport of the same size, on vLLM 0.5.5's CPU build.

qwen35_decode_vs_dense_backport   decode tokens per second of a tiny Qwen3.5 (three Gated DeltaNet
                                  layers, one gated attention layer) / those of a tiny Qwen3 with
                                  the same hidden size, heads, MLP and four attention layers, both
                                  served through the iluvatar-bi100 launcher (the image's backports)

Both engines run side by side; each round sends the same load to one and then the other (four
requests at once, a short prompt, 64 greedy tokens each), and the figure is the median of the
rounds' ratios, so that load from elsewhere on a shared machine falls on both alike.
Needs .venv-engine055 and .venv-author (`make envs`).
"""

import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.engine import ENGINE_055, Server, free_port  # noqa: E402
from tests.fixtures.factory import build  # noqa: E402

CARD = "iluvatar-bi100"
REQUESTS, NEW_TOKENS, ROUNDS = 4, 64, 5
PROMPT = list(range(20, 36))


def start(model: Path, work: Path, log: Path) -> Server:
    argv = ENGINE_055.launcher_argv(free_port()) + ["--dtype", "float32", "--return-tokens-as-token-ids"]
    server = Server(argv, ENGINE_055.launcher_env(model, CARD, work), log, int(argv[argv.index("--port") + 1]))
    if not server.wait_ready():
        server.stop()
        raise SystemExit(f"bench_qwen35: {model.name} did not start:\n{server.log()[-3000:]}")
    return server


def decode_rate(server: Server, model: Path) -> float:
    """Generated tokens per second of REQUESTS concurrent requests (the prompt is short: decode dominates)."""

    def one(_: int) -> int:
        return len(server.greedy_tokens(str(model), PROMPT, NEW_TOKENS, ids_in_request=False))

    begin = time.perf_counter()
    with ThreadPoolExecutor(REQUESTS) as pool:
        tokens = sum(pool.map(one, range(REQUESTS)))
    return tokens / (time.perf_counter() - begin)


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
