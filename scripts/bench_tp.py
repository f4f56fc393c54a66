"""make bench: tensor parallelism of a backport on vLLM 0.5.5's CPU build (the BI-100's engine generation).

tp2_decode_vs_tp1   decode tokens per second of a tiny Qwen3 (the image's backport) served through
                    the iluvatar-bi100 launcher with --tensor-parallel-size 2 / those of the same
                    model at size 1 (two ranks over gloo, each on half the heads and half the MLP)

Both engines run side by side; each round sends the same load to one and then the other (four
requests at once, a short prompt, 64 greedy tokens each), and the figure is the median of the
rounds' ratios, so that load from elsewhere on a shared machine falls on both alike. The two
answer the same greedy tokens (else the figure would compare different work and it says so).
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


def start(model: Path, tp: int, work: Path, log: Path) -> Server:
    argv = ENGINE_055.launcher_argv(free_port()) + ["--dtype", "float32", "--return-tokens-as-token-ids", "--tensor-parallel-size", str(tp)]
    server = Server(argv, ENGINE_055.launcher_env(model, CARD, work), log, int(argv[argv.index("--port") + 1]))
    if not server.wait_ready():
        server.stop()
        raise SystemExit(f"bench_tp: TP {tp} did not start:\n{server.log()[-3000:]}")
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
        print("tp2_decode_vs_tp1: skipped (needs .venv-engine055: make envs)")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        model = build("v5", "generic", base / "qwen3", "--model-type", "qwen3", "--layers", "4")
        servers = {}
        try:
            for tp in (1, 2):
                servers[tp] = start(model, tp, base / f"work-tp{tp}", base / f"tp{tp}.log")
            answers = {tp: server.greedy_tokens(str(model), PROMPT, NEW_TOKENS, ids_in_request=False) for tp, server in servers.items()}
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
