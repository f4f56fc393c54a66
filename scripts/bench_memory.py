"""make bench: what fits one node of each card, by doctor's memory check (rule KV).

Popular model shapes, from a tiny Llama to a 1T-parameter MoE (harness/fixtures/shapes.py:
config.json plus safetensors shards whose headers declare every tensor, sparse: no weights), are
judged by `doctor FOLDER --card all --json` with no platform arguments: each model gets the
smallest tensor-parallel size of the card's node that holds its weights and one request of the
length its engine derives, or fails (OOM, KV) where a whole node cannot.

memory_fit_<card>         models of the set that fit one node of the card
memory_start_<card>       models doctor says start on the card (every layer: metadata, memory, tokens)
memory_start_without_check_<card>  the same with the memory check skipped (COMPAT_SKIP=KV): what
                          the start rate said before it
doctor_memory_models_per_s  models x cards judged per second by that one command (engine processes
                          and the header reads of ~2,000 shards included)

--markdown prints the table docs/memory.md shows.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.fixtures.shapes import SHAPES, write_model  # noqa: E402


def doctor_all(folder: Path, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "common", "doctor", str(folder), "--card", "all", "--json"],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return json.loads(proc.stdout)


def cell(row: dict) -> str:
    """What fits, in a word: the tensor-parallel size of one node, or the code that stops it."""
    memory = row["memory"] or {}
    if memory.get("fits") is None:
        return row["state"]
    if memory["fits"]:
        return f"TP {memory['tensor_parallel_size']}"
    return f"{memory['code']}: {memory['weights_gib']:.0f} GiB of weights, more than a node"


def main() -> bench_cli.Figures:
    parser = bench_cli.parser(__doc__)
    parser.add_argument("--markdown", action="store_true", help="print docs/memory.md's table of what fits")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "shapes"
        for i, (name, config) in enumerate(SHAPES.items()):
            write_model(folder / f"{i:02d}-{name}", config)
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        start = time.perf_counter()
        report = doctor_all(folder, env)
        elapsed = time.perf_counter() - start
        # The same set with the memory check skipped: what the start rate said before it.
        before = doctor_all(folder, dict(env, COMPAT_SKIP="KV"))
    rows = report["rows"]
    if opts.markdown:
        cards = list(report["cards"])
        print("| model | " + " | ".join(cards) + " |")
        print("|---|" + "---|" * len(cards))
        for model in report["models"]:
            cells = [cell(next(r for r in rows if r["model"] == model and r["card"] == card)) for card in cards]
            print(f"| {Path(model).name[3:]} | " + " | ".join(cells) + " |")
        print()
    figures = {}
    for card in report["cards"]:
        mine = [r for r in rows if r["card"] == card]
        then = [r for r in before["rows"] if r["card"] == card]
        figures[f"memory_fit_{card}"] = f"{sum(1 for r in mine if (r['memory'] or {}).get('fits'))}/{len(mine)}"
        figures[f"memory_start_{card}"] = f"{sum(1 for r in mine if r['verdict'] == 'starts')}/{len(mine)}"
        figures[f"memory_start_without_check_{card}"] = f"{sum(1 for r in then if r['verdict'] == 'starts')}/{len(then)}"
    figures["doctor_memory_models_per_s"] = f"{len(rows) / elapsed:.2f}"
    return figures


if __name__ == "__main__":
    bench_cli.run(main)
