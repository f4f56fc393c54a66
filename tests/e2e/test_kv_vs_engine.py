"""KV against the real engines: doctor's prediction of which --max-model-len values an engine's KV
cache holds agrees with vLLM 0.5.5 and 0.11.0 themselves, on this CPU.

On a CPU build the KV space is a set size, VLLM_CPU_KVCACHE_SPACE GiB (1 here, harness/engine.py),
beside weights that live in host memory: the refusal is real here, and doctor, given that size as
the device's KV space (memory_fit.Device.cpu), must predict it exactly. The two engines count
differently (0.5.5 in whole 16-token blocks of every layer, 0.11 each layer's 128-token pages on
the CPU), so a model is chosen whose limits differ (116496 tokens on 0.5.5, 116480 on 0.11) and
the lengths between them start on one engine and not the other.

Each engine judges every (model, --max-model-len, tensor-parallel size) case in one process
(tests/engine_kv_capacity.py: the engine's own config objects and KV methods, as `vllm serve`
runs them); two real `vllm serve` starts per engine, at its limit and one token past it, hold
that harness to the engine itself. Models are metadata-only (harness/fixtures/shapes.py: sparse
safetensors files; the served one borrows the committed tiny tokenizer).
"""

import re
import shutil
from pathlib import Path
from typing import Dict, List

import pytest

from common.memory.memory_fit import Device, assess
from common.model.modeldir import ModelDir
from common.engine.profile import load_profile
from common.triage import triage_file
from common.engine.vllm_args import UserArgs
from harness.engine import COMMON_ENV, ENGINE_055, ENGINE_0110, ROOT, free_port
from harness.fixtures.shapes import LLAMA_31_8B, write_model

pytestmark = pytest.mark.e2e

SPACE = int(COMMON_ENV["VLLM_CPU_KVCACHE_SPACE"]) << 30
ENGINES = {"iluvatar-bi100": ENGINE_055, "nv-a100": ENGINE_0110}
PROBE = Path(__file__).resolve().parents[1] / "engine_kv_capacity.py"
BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "vocab_size": 396,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
MODELS: Dict[str, dict] = {
    # 6 layers x 2 x 3 KV heads x 128 x 2 bytes = 9216 bytes a token: 0.5.5 holds 7281 blocks of
    # 16 tokens (116496), 0.11 910 pages of 128 tokens in each of the 6 layers (116480).
    "gqa": dict(BASE, num_attention_heads=6, num_key_value_heads=3, head_dim=128, num_hidden_layers=6),
    # No KV-head key: every attention head is cached (head size 384/4 = 96).
    "mha": dict(BASE, hidden_size=384, num_attention_heads=4, num_hidden_layers=10),
    # The Llama-3.1-8B shape: 128 KiB a token, 8192 tokens in 1 GiB.
    "llama-3.1-8b": dict(LLAMA_31_8B),
}
# (model, --max-model-len values, tensor-parallel size): around each engine's limit and far past.
CASES = [
    ("gqa", [65536, 116480, 116481, 116496, 116497, 131072], 1),
    ("mha", [69888, 69889, 69904, 69905], 1),
    ("llama-3.1-8b", [4096, 8192, 8193, 131072], 1),
    # Two ranks: each holds half the KV heads in its own 1 GiB.
    ("llama-3.1-8b", [16384, 16385], 2),
]
# The served model's limits: one start at the engine's limit, one a token past it.
LIMITS = {"iluvatar-bi100": 116496, "nv-a100": 116480}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Dict[str, Path]:
    base = tmp_path_factory.mktemp("kv")
    out = {name: write_model(base / name, config) for name, config in MODELS.items()}
    for name in TOKENIZER_FILES:  # the served one needs a tokenizer: the committed tiny one (396 tokens)
        shutil.copy(ROOT / "harness" / "fixtures" / "models" / "457-generic" / name, out["gqa"] / name)
    return out


def engine_says(engine, cases: List[dict]) -> List[dict]:
    return engine.probe(PROBE, cases, timeout=900)


def doctor_says(card: str, model: Path, args: List[str]):
    """doctor's memory check with the CPU build's KV space as the device's."""
    return assess(ModelDir(str(model)), load_profile(card), UserArgs(args), {}, device=Device.cpu(SPACE))


def args_for(length: int, tp: int, block: int) -> List[str]:
    # The block size the engine's CPU platform picks (0.11: 128 with IPEX; CUDA's is the profile's 16).
    return ["--max-model-len", str(length), "--tensor-parallel-size", str(tp), "--dtype", "bfloat16", "--block-size", str(block)]


@pytest.mark.parametrize("card", sorted(ENGINES))
def test_doctor_predicts_which_max_model_lens_the_engines_kv_cache_holds(models, card):
    engine = ENGINES[card]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    cases = [{"model": str(models[name]), "max_model_len": n, "tp": tp} for name, lengths, tp in CASES for n in lengths]
    answers = engine_says(engine, cases)
    refused = started = 0
    for case, answer in zip(cases, answers, strict=True):
        model = Path(case["model"])
        got = doctor_says(card, model, args_for(case["max_model_len"], case["tp"], answer["block_size"]))
        where = (model.name, case["max_model_len"], case["tp"], answer)
        assert got.fits == (answer["refused"] is None), where
        assert got.judged is not None and got.judged.code == (None if got.fits else "KV"), where
        # The longest length it holds is the engine's own figure (0.5.5's blocks x block size is
        # not capped by the config's length; doctor never names more than the engine derives).
        assert got.largest_len == min(answer["capacity"], got.derived or answer["capacity"]), where
        if answer["refused"] is None:
            started += 1
        else:
            refused += 1
            assert "larger than" in answer["refused"], answer
            assert triage_code(answer["refused"]) == "KV"
    assert refused >= 6 and started >= 6
    # The lengths between the two engines' limits start on 0.5.5 only.
    between = [a for c, a in zip(cases, answers, strict=True) if c["max_model_len"] in (116481, 116496)]
    assert all((a["refused"] is None) == (card == "iluvatar-bi100") for a in between), between


def triage_code(message: str) -> str:
    from common.triage import scan, signatures

    found = scan([message.encode()], signatures())
    return found[0].code if found else "unknown"


@pytest.mark.parametrize("card", sorted(ENGINES))
def test_real_starts_at_the_limit_and_one_token_past_it(models, card, server):
    """The harness held to the engine: `vllm serve` at the limit doctor names starts, one token
    more is refused with the engine's KV message, which triage names KV."""
    engine = ENGINES[card]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    model, limit = models["gqa"], LIMITS[card]
    block = 16 if card == "iluvatar-bi100" else 128
    for length in (limit, limit + 1):
        args = args_for(length, 1, block)
        predicted = doctor_says(card, model, args)
        port = free_port()
        argv = [str(engine.bin / "vllm"), "serve", str(model), *args, "--port", str(port), "--host", "127.0.0.1", *engine.serve_args]
        srv = server(argv, engine.env(), f"{card}-{length}")
        ready = srv.wait_ready()
        log = srv.log()
        assert ready == predicted.fits, (length, predicted.to_json(), log[-3000:])
        if ready:
            assert predicted.largest_len == limit
        else:
            assert re.search(r"larger than the (maximum number of tokens that can be stored in KV cache|available KV cache memory)", log), (
                log[-3000:]
            )
            assert triage_file(str(srv.log_path)).code == "KV"
        srv.stop()
