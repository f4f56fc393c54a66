"""make demo: build a model the way transformers 5 saves it, then show the image's plan for it.

The model is tiny and random, but its files are exactly what a model author's transformers 5
writes today (TokenizersBackend, a list of extra_special_tokens): vanilla vLLM 0.11.0 refuses to
start on it. The plan below is what the card image's preflight would do, verified with the
card engine's transformers.
"""

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.fixtures.factory import build  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--card", default="nv-a100")
    opts = parser.parse_args()
    model = ROOT / "demo" / "transformers5-model"
    if model.exists():
        shutil.rmtree(model)
    model.parent.mkdir(exist_ok=True)
    print(f"building {model.relative_to(ROOT)} with transformers 5 (.venv-author) ...")
    build("v5", "generic", model, "--no-weights")
    config = (model / "tokenizer_config.json").read_text()
    print(f"its tokenizer_config.json:\n{config}")
    env = dict(os.environ, COMPAT_ENGINE_PYTHON=str(ROOT / ".venv" / "bin" / "python"), COMPAT_WORK_DIR=str(ROOT / "demo" / "work"))
    cmd = [sys.executable, "-m", "common", "preflight", str(model), "--card", opts.card, "--", "--max-model-len", "256", "--port", "8000"]
    print("$ python3 -m common preflight demo/transformers5-model --card " + opts.card + " -- --max-model-len 256 --port 8000")
    return subprocess.call(cmd, cwd=str(ROOT), env=env)


if __name__ == "__main__":
    sys.exit(main())
