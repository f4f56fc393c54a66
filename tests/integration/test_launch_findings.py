"""A start the preflight knows will go wrong is said in the log, and vLLM is started all the same
(red line 2): a configuration the card's engine computes differently (C1, from the conformance
cells), and a --max-model-len the engine will refuse (CTX), through the image's entrypoint."""

import json

import pytest

from conformance.cases import load_cases
from conformance.models import ensure, model_dir
from tests.launcher_harness import Sandbox

GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "num_hidden_layers": 26,
    "head_dim": 256,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "query_pre_attn_scalar": 256,
    "vocab_size": 256000,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.4",
}


@pytest.fixture
def sandbox(tmp_path):
    boxes = []

    def make(model):
        box = Sandbox(model)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.cleanup()


def test_a_configuration_the_engine_computes_differently_is_logged_and_still_started(sandbox):
    """A Cohere 2 (a window on three layers of four) saved by transformers 4.57 on the newest
    engine: its conformance cell differs (the engine's window is one position off)."""
    [case] = [c for c in load_cases() if c["name"] == "cohere2"]
    ensure([case], ["v5", "457"])
    box = sandbox(model_dir(case, "457") / "model")
    args = ["--dtype", "float32", "--max-model-len", "256"]
    result = box.entrypoint(args, box.env(COMPAT_CARD="nv-a100@next"))
    assert result.returncode == 0, result.stderr
    assert "C1 error: vLLM " in result.stderr and "computes this configuration differently from the author's transformers" in result.stderr
    assert result.argv[1:] == ["serve", str(box.model), *args]


def test_a_max_model_len_the_engine_refuses_is_logged_with_what_starts_and_still_started(sandbox, tmp_path):
    model = tmp_path / "gemma2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(GEMMA2, max_position_embeddings=4096)))
    box = sandbox(model)
    args = ["--max-model-len", "8192"]
    result = box.entrypoint(args, box.env(COMPAT_CARD="nv-a100"))
    assert result.returncode == 0, result.stderr
    assert (
        "CTX error: --max-model-len 8192 is longer than vLLM 0.11.0 derives for this model (max_position_embeddings=4096" in result.stderr
    )
    assert "the largest that starts is --max-model-len 4096" in result.stderr
    assert result.argv[-2:] == args  # the platform's arguments, untouched


def test_gemma2_at_its_full_context_on_the_bi100_is_served_by_the_backport_not_capped(sandbox, tmp_path):
    """vLLM 0.5.5 would cap Gemma 2 to its 4096 window and refuse 8192; R10's backport keeps each
    layer's window and switches the engine-wide one off (the engine's own switch), so nothing caps."""
    model = tmp_path / "gemma2"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GEMMA2))
    box = sandbox(model)
    args = ["--max-model-len", "8192"]
    result = box.entrypoint(args, box.env(COMPAT_CARD="iluvatar-bi100"))
    assert result.returncode == 0, result.stderr
    assert "CTX" not in result.stderr and "R10" in result.stderr, result.stderr
    assert result.argv[-2:] == args
