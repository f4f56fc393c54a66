"""The Ministral 3 backport's pure parts (compat_backports/layers/: yarn.py, text_of_vlm.py), held to the
transformers 5 that authors the models and to vLLM 0.5.5's own rotary embedding.

- cos and sin: transformers 5's Ministral3RotaryEmbedding (author venv) against the table of
  the rotary vLLM 0.5.5's get_rope builds from the rope scaling the backport hands it (engine venv);
- the query scale: transformers 5's get_llama_4_attn_scale against the formula ministral3.py applies;
- the weight names: what transformers 5.24 and 4.55 write for Mistral3ForConditionalGeneration,
  renamed by text_of_vlm, against the text model's own parameter names.
The conformance cell `ministral3` (conformance/results.json) holds the whole model to the
author's greedy tokens on the engine.
"""

import json
import math
import os
import subprocess

import pytest

from common.vllm_plugin.compat_backports import BACKPORTS
from common.vllm_plugin.compat_backports.layers.text_of_vlm import text_name
from common.vllm_plugin.compat_backports.layers.yarn import (
    attention_factor,
    engine_rope_scaling,
    get_mscale,
    query_scale,
)

from common.tests.helpers import ROOT

AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"  # transformers 5.x
ENGINE055_PYTHON = ROOT / ".venv-engine055" / "bin" / "python"  # vLLM 0.5.5, transformers 4.55
PLUGIN_DIR = ROOT / "common" / "vllm_plugin"
needs_venvs = pytest.mark.skipif(
    not (AUTHOR_PYTHON.exists() and ENGINE055_PYTHON.exists()),
    reason="needs .venv-author (transformers 5) and .venv-engine055 (vLLM 0.5.5): run `make author-env engine055-env`",
)

MINISTRAL3_8B = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16384, "mscale": 1.0, "mscale_all_dim": 1.0}
# Rope parameters as published (Ministral 3, Devstral Small 2, Devstral 2's mscale_all_dim 0)
# and the other branches of transformers' attention factor, with the max_position_embeddings.
ROPES = {
    "ministral3-8b": (dict(MINISTRAL3_8B, beta_fast=32.0, beta_slow=1.0, llama_4_scaling_beta=0.1), 262144),
    "devstral-small-2": (dict(MINISTRAL3_8B, factor=48.0, original_max_position_embeddings=8192, llama_4_scaling_beta=0.1), 393216),
    "mscale-all-dim-0": (
        dict(MINISTRAL3_8B, factor=64.0, original_max_position_embeddings=4096, mscale_all_dim=0.0, beta_fast=4.0),
        262144,
    ),
    "deepseek-mscales": (dict(MINISTRAL3_8B, factor=40.0, original_max_position_embeddings=4096, mscale=1.0, mscale_all_dim=0.707), 163840),
    "plain-yarn": ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}, 128),
    "explicit-factor": (dict(MINISTRAL3_8B, attention_factor=0.9), 262144),
}


def query_scale_at(position: int, beta: float, original: int) -> float:
    """The query scale ministral3.py applies at `position` (there on the engine's position tensor)."""
    return 1.0 + beta * math.log(1 + math.floor(position / original))


def test_attention_factor_follows_transformers_branches():
    assert attention_factor(MINISTRAL3_8B, 262144) == 1.0  # mscale / mscale_all_dim: the ratio of two equal values
    assert attention_factor(dict(MINISTRAL3_8B, mscale_all_dim=0.0), 262144) == get_mscale(16.0)  # a zero turns the ratio off
    assert attention_factor({"factor": 4.0}, 128) == pytest.approx(1 + 0.1 * math.log(4.0))
    assert attention_factor(dict(MINISTRAL3_8B, attention_factor=0.5), 262144) == 0.5
    # No factor: transformers takes max_position_embeddings over the original length.
    assert attention_factor({"original_max_position_embeddings": 64}, 256) == get_mscale(4.0)


@pytest.mark.parametrize("name", sorted(ROPES))
def test_the_engines_yarn_factor_becomes_transformers(name):
    """vLLM 0.5.5's yarn multiplies cos/sin by get_mscale(factor) * attn_factor."""
    params, longest = ROPES[name]
    scaling = engine_rope_scaling(params, longest)
    assert scaling["rope_type"] == "yarn" and scaling["factor"] == params["factor"]
    assert get_mscale(scaling["factor"]) * scaling["attn_factor"] == pytest.approx(attention_factor(params, longest), rel=1e-15)
    assert set(scaling) == {"rope_type", "factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "attn_factor"}


def test_rope_kinds_other_than_default_and_yarn_are_refused():
    assert engine_rope_scaling({"rope_type": "default", "rope_theta": 1e6}, 4096) is None
    assert engine_rope_scaling({}, 4096) is None
    with pytest.raises(ValueError, match="llama3"):
        engine_rope_scaling({"rope_type": "llama3", "factor": 8.0}, 4096)
    with pytest.raises(ValueError, match="truncate"):
        engine_rope_scaling(dict(MINISTRAL3_8B, truncate=False), 262144)


def test_the_query_scale_steps_at_each_multiple_of_the_original_length():
    assert query_scale(MINISTRAL3_8B, 262144) is None  # no beta: no scale
    assert query_scale(dict(MINISTRAL3_8B, llama_4_scaling_beta=0.0), 262144) is None
    assert query_scale(dict(MINISTRAL3_8B, llama_4_scaling_beta=0.1), 262144) == (0.1, 16384)
    assert [query_scale_at(p, 0.1, 16) for p in (0, 15)] == [1.0, 1.0]
    assert query_scale_at(16, 0.1, 16) == query_scale_at(31, 0.1, 16) == 1 + 0.1 * math.log(2)
    assert query_scale_at(32, 0.1, 16) == 1 + 0.1 * math.log(3)


def test_the_text_of_a_mistral3_checkpoint_keeps_its_names_and_the_vision_side_is_skipped():
    assert text_name("language_model.model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert text_name("language_model.lm_head.weight") == "lm_head.weight"
    assert text_name("model.language_model.norm.weight") == "model.norm.weight"
    assert text_name("lm_head.weight") == "lm_head.weight"
    assert text_name("model.embed_tokens.weight") == "model.embed_tokens.weight"  # a text-only save
    for vision in ("vision_tower.patch_conv.weight", "multi_modal_projector.linear_1.weight", "model.vision_tower.ln_pre.weight"):
        assert text_name(vision) is None


def test_both_classes_are_registered_on_the_ministral3_module():
    for arch in ("Ministral3ForCausalLM", "Mistral3ForConditionalGeneration"):
        assert BACKPORTS[arch][0].module == "ministral3"
        assert "model_executor/layers/rotary_embedding.py:YaRNScalingRotaryEmbedding" in BACKPORTS[arch][0].requires


def _run(python, code, *args, env=None):
    proc = subprocess.run([str(python), "-c", code, *args], capture_output=True, text=True, timeout=300, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# transformers 5, per job: cos and sin of Ministral3RotaryEmbedding at positions 0..N-1 (the first
# half of the head: the two halves repeat), and get_llama_4_attn_scale there.
AUTHOR_ROPE = """
import json, sys, torch
from transformers import Ministral3Config
from transformers.models.ministral3.modeling_ministral3 import Ministral3RotaryEmbedding, get_llama_4_attn_scale
out = []
for params, longest, head, n in json.loads(sys.argv[1]):
    config = Ministral3Config(hidden_size=4 * head, num_attention_heads=4, head_dim=head, max_position_embeddings=longest,
                              rope_parameters=dict(params, rope_theta=1e6))
    positions = torch.arange(n)[None]
    cos, sin = Ministral3RotaryEmbedding(config)(torch.zeros(1, dtype=torch.float32), positions)
    rope = config.rope_parameters
    scale = get_llama_4_attn_scale(positions, rope["llama_4_scaling_beta"], rope["original_max_position_embeddings"])
    out.append({"cos": cos[0, :, : head // 2].tolist(), "sin": sin[0, :, : head // 2].tolist(), "scale": scale.flatten().tolist()})
print(json.dumps(out))
"""
# vLLM 0.5.5: the cos/sin table of get_rope with the backport's rope scaling.
ENGINE_ROPE = """
import json, sys
from compat_backports.layers.yarn import engine_rope_scaling
from vllm.model_executor.layers.rotary_embedding import get_rope
out = []
for params, longest, head, n in json.loads(sys.argv[1]):
    rope = get_rope(head, rotary_dim=head, max_position=longest, base=1e6, rope_scaling=engine_rope_scaling(params, longest))
    cos, sin = rope.cos_sin_cache[:n].chunk(2, dim=-1)
    out.append({"cos": cos.tolist(), "sin": sin.tolist()})
print(json.dumps(out))
"""
COMPARED = ("devstral-small-2", "mscale-all-dim-0", "deepseek-mscales", "plain-yarn", "explicit-factor")


@needs_venvs
def test_the_engines_cos_and_sin_are_the_authors():
    jobs = []
    for name in COMPARED:
        # A short original length, so the query scale steps within the positions compared.
        params = dict(ROPES[name][0], original_max_position_embeddings=16, llama_4_scaling_beta=0.1)
        jobs.append([params, int(16 * params["factor"]), 32, 48])
    authors = _run(AUTHOR_PYTHON, AUTHOR_ROPE, json.dumps(jobs))
    engines = _run(ENGINE055_PYTHON, ENGINE_ROPE, json.dumps(jobs), env=dict(os.environ, PYTHONPATH=str(PLUGIN_DIR)))
    for name, author, engine in zip(COMPARED, authors, engines, strict=True):
        for key in ("cos", "sin"):
            pairs = zip(sum(author[key], []), sum(engine[key], []), strict=True)
            worst = max(abs(a - e) for a, e in pairs)
            assert worst <= 1e-6, f"{name}: {key} differs by {worst}"
        assert author["scale"] == pytest.approx([query_scale_at(p, 0.1, 16) for p in range(48)], rel=1e-6), name


# Save a tiny Mistral3ForConditionalGeneration with this transformers; print the checkpoint's
# tensor names and the text model's own parameter names (its ...ForCausalLM).
SAVED_NAMES = """
import json, sys, glob, transformers
from safetensors import safe_open
text_type, causal_lm, out = sys.argv[1:4]
text = dict(model_type=text_type, vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, tie_word_embeddings=False)
vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, head_dim=8, image_size=16, patch_size=4)
config = transformers.Mistral3Config(text_config=text, vision_config=vision, image_token_index=5, tie_word_embeddings=False)
transformers.Mistral3ForConditionalGeneration(config).save_pretrained(out)
names = []
for shard in glob.glob(out + "/*.safetensors"):
    with safe_open(shard, "pt") as fh:
        names += list(fh.keys())
own = getattr(transformers, causal_lm)(config.text_config).state_dict()
print(json.dumps({"saved": sorted(names), "text": sorted(own), "version": transformers.__version__}))
"""


@needs_venvs
@pytest.mark.parametrize(
    "python, text_type, causal_lm",
    [(AUTHOR_PYTHON, "ministral3", "Ministral3ForCausalLM"), (ENGINE055_PYTHON, "mistral", "MistralForCausalLM")],
)
def test_a_saved_mistral3_maps_onto_the_text_model(tmp_path, python, text_type, causal_lm):
    """transformers 5.24 and 4.55 both write the pre-4.52 names; every text tensor lands on the
    text model's own parameter, every other one is the vision tower's or the projector's."""
    got = _run(python, SAVED_NAMES, text_type, causal_lm, str(tmp_path / "m"))
    mapped = [text_name(n) for n in got["saved"]]
    assert sorted(n for n in mapped if n is not None) == got["text"], got["version"]
    skipped = [n for n, m in zip(got["saved"], mapped, strict=True) if m is None]
    assert skipped and all(n.startswith(("vision_tower.", "multi_modal_projector.")) for n in skipped)
    assert any(n.startswith("language_model.model.") for n in got["saved"]), got["saved"][:5]


def test_gemma4s_vision_and_audio_towers_and_their_embedders_are_skipped_and_its_text_kept():
    """Names as transformers 5.24 saves Gemma4ForConditionalGeneration (its module tree)."""
    assert text_name("model.language_model.embed_tokens_per_layer.weight") == "model.embed_tokens_per_layer.weight"
    assert text_name("model.language_model.per_layer_model_projection.weight") == "model.per_layer_model_projection.weight"
    for other in (
        "model.vision_tower.encoder.layers.0.mlp.up_proj.weight",
        "model.embed_vision.embedding_projection.weight",
        "model.audio_tower.conformer.0.ffw_layer_start.weight",
        "model.embed_audio.embedding_projection.weight",
    ):
        assert text_name(other) is None, other
