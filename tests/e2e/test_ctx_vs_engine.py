"""CTX against the real engines: doctor's arithmetic of the longest context vLLM derives for a model
(profile facts read from each engine's source) agrees with what the engine's own ModelConfig does
with the same config.json and --max-model-len, on vLLM 0.5.5, 0.11.0 and 0.32.0.

Each engine judges every (config, --max-model-len) pair in one process (tests/engine_max_len.py:
the engine's EngineArgs(...).create_model_config(), which refuses exactly as `vllm serve` does);
the preflight judges the same pairs with the card's profile. Both must say "starts" or "refused",
and a refusal's largest length must be the one the engine names.
"""

import json
import re
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from common.rules.ctx_context_length import RULE
from harness.engine import ENGINE_055, ENGINE_0110, ENGINE_NEXT
from harness.fixtures.shapes import TINY

pytestmark = pytest.mark.e2e

# shapes.TINY's Llama with the positions the rope scalings below stretch, and no head_dim of its own.
LLAMA = dict({k: v for k, v in TINY.items() if k not in ("head_dim", "tie_word_embeddings")}, vocab_size=400, max_position_embeddings=4096)
GEMMA2 = dict(
    LLAMA,
    architectures=["Gemma2ForCausalLM"],
    model_type="gemma2",
    head_dim=64,
    max_position_embeddings=8192,
    sliding_window=4096,
    query_pre_attn_scalar=64,
)
QWEN2_YARN = dict(
    LLAMA,
    architectures=["Qwen2ForCausalLM"],
    model_type="qwen2",
    max_position_embeddings=32768,
    rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
)
LINEAR = dict(LLAMA, rope_scaling={"type": "linear", "factor": 2.0})
LLAMA3 = dict(
    LLAMA,
    max_position_embeddings=131072,
    rope_scaling={
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
)
MODEL_MAX = dict(LLAMA, model_max_length=16384)

# (name, config, --max-model-len values around each engine's limit)
CASES: List[Tuple[str, Dict, List[int]]] = [
    ("llama", LLAMA, [4096, 4097]),
    ("gemma2-window", GEMMA2, [4096, 4097, 8192]),
    ("qwen2-yarn", QWEN2_YARN, [131072, 131073]),
    ("linear-rope", LINEAR, [8192, 8193]),
    ("llama3-rope", LLAMA3, [131072, 131073]),
    ("model-max-length", MODEL_MAX, [8192, 16384, 16385]),
]
ENGINES = {"iluvatar-bi100": ENGINE_055, "nv-a100": ENGINE_0110, "nv-a100@next": ENGINE_NEXT}
PROBE = Path(__file__).resolve().parents[1] / "engine_max_len.py"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Dict[str, Path]:
    base = tmp_path_factory.mktemp("ctx")
    out = {}
    for name, config, _ in CASES:
        (base / name).mkdir()
        (base / name / "config.json").write_text(json.dumps(config))
        out[name] = base / name
    return out


def engine_says(engine, pairs: List[Tuple[Path, int]]) -> List[Dict]:
    return engine.probe(PROBE, [[str(m), n] for m, n in pairs])


def we_say(card: str, model: Path, max_len: int) -> List[dict]:
    from common.model.modeldir import ModelDir
    from common.engine.profile import load_profile
    from common.rules.support.base import Context
    from common.engine.vllm_args import UserArgs

    ctx = Context(ModelDir(str(model)), load_profile(card), {}, UserArgs(["--max-model-len", str(max_len)]), {})
    return [f.to_json() for f in RULE.check(ctx).findings]


@pytest.mark.parametrize("card", sorted(ENGINES))
def test_doctor_predicts_which_max_model_lens_the_engine_refuses(models, card):
    engine = ENGINES[card]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    pairs = [(models[name], n) for name, _, lengths in CASES for n in lengths]
    answers = engine_says(engine, pairs)
    refusals = 0
    for (model, n), answer in zip(pairs, answers, strict=True):
        findings = we_say(card, model, n)
        assert (answer["refused"] is not None) == bool(findings), (model.name, n, answer, findings)
        if findings:
            refusals += 1
            [finding] = findings
            assert finding["code"] == "CTX" and finding["severity"] == "error"
            # The largest length that starts is the largest the engine's own refusal names.
            named = [float(v) for v in re.findall(r"=(\d+(?:\.\d+)?)", answer["refused"])]
            assert f"--max-model-len {int(max(named))}" in finding["message"], (finding, answer)
    # Each engine refuses something here, and 0.5.5 refuses Gemma 2 past its window, the others do not.
    assert refusals >= 5
    gemma = next(a for (m, n), a in zip(pairs, answers, strict=True) if m.name == "gemma2-window" and n == 8192)
    assert (gemma["refused"] is not None) == (card == "iluvatar-bi100"), gemma
