"""What the decode benchmarks share (bench_qwen35.py, bench_tp.py): a model served through a card's
launcher (the iluvatar-bi100's on vLLM 0.5.5's CPU build unless told), and its decode rate under a
fixed load.

Each round of a benchmark sends the same load to one server and then the other, and its figure is
the median of the rounds' ratios, so that load from elsewhere on a shared machine falls on both
alike. Imported by those scripts (their folder is on sys.path when they run)."""

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.engine import ENGINE_055, Engine, Server, free_port  # noqa: E402

CARD = "iluvatar-bi100"
REQUESTS, NEW_TOKENS, ROUNDS = 4, 64, 5
PROMPT = list(range(20, 36))


def start(
    model: Path, work: Path, log: Path, *args: str, env: Optional[Dict[str, str]] = None, engine: Engine = ENGINE_055, card: str = CARD
) -> Server:
    """`card`'s launcher on `engine` serving `model` (float32, token ids in answers, then `args`;
    `env` added to the container's environment), ready."""
    argv = engine.launcher_argv(free_port()) + ["--dtype", "float32", "--return-tokens-as-token-ids", *args]
    server = Server(argv, engine.launcher_env(model, card, work, env), log, int(argv[argv.index("--port") + 1]))
    if not server.wait_ready():
        server.stop()
        raise SystemExit(f"{Path(sys.argv[0]).stem}: {model.name} {' '.join(args)} did not start:\n{server.log()[-3000:]}")
    return server


def greedy(server: Server, model: Path) -> List[int]:
    return server.greedy_tokens(str(model), PROMPT, NEW_TOKENS, ids_in_request=False)


def decode_rate(server: Server, model: Path) -> float:
    """Generated tokens per second of REQUESTS concurrent requests (the prompt is short: decode dominates)."""
    begin = time.perf_counter()
    with ThreadPoolExecutor(REQUESTS) as pool:
        tokens = sum(pool.map(lambda _: len(greedy(server, model)), range(REQUESTS)))
    return tokens / (time.perf_counter() - begin)
