"""What the Qwen3.5 end-to-end tests of every engine generation share (vllm055/ and vllm011/'s
test_e2e_qwen35_*.py): the tiny Qwen3.5 saved by transformers 5 (every norm drawn at random), the
prompts of 9 to 100 tokens, the author's greedy tokens from transformers 5's own `generate`, and
a digest of the model directory (which the image never writes). A test module imports the
fixtures (model_fixture, ...: fixtures named model, prompts, author)."""

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from harness.fixtures.factory import AUTHOR_PYTHON, build

NEW_TOKENS = 32
LENGTHS = (100, 9, 60, 50, 75)  # prompt lengths; on 0.5.5, 60 and 50 are the pair that cannot decode side by side

# transformers 5's greedy continuation of each prompt, one prompt at a time, in float32.
AUTHOR_GENERATE = """
import json, sys, torch, transformers
path, prompts, count = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
model.generation_config.eos_token_id = None
out = []
for prompt in prompts:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        got = model.generate(ids, max_new_tokens=count, min_new_tokens=count, do_sample=False, attention_mask=torch.ones_like(ids))
    out.append(got[0, len(prompt):].tolist())
print("AUTHOR " + json.dumps(out))
"""


@pytest.fixture(scope="module", name="model")
def model_fixture(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("qwen35") / "qwen3.5"
    return build("v5", "generic", dest, "--initializer-range", "0.1", "--random-norms", "--model-type", "qwen3_5")


@pytest.fixture(scope="module", name="prompts")
def prompts_fixture(model) -> List[List[int]]:
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    rng = random.Random(35)
    return [[rng.randrange(10, vocab) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module", name="author")
def author_fixture(model, prompts) -> List[List[int]]:
    argv = [str(AUTHOR_PYTHON["v5"]), "-c", AUTHOR_GENERATE, str(model), json.dumps(prompts), str(NEW_TOKENS)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("AUTHOR ")]
    return json.loads(line[len("AUTHOR ") :])


def digest(model: Path) -> Dict[str, str]:
    return {str(p.relative_to(model)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model.rglob("*")) if p.is_file()}
