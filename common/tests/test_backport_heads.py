"""Per-layer head sizes (compat_backports/layers/heads.py) and what R10 writes for them: Gemma 4's
full-attention layers have a wider head than its sliding ones, vLLM 0.5.5 sizes every layer's KV
cache by one head_dim, so the config the engine reads says the widest, each layer's own beside it."""

import pytest

from common.engine.profile import Profile
from common.vllm_plugin.compat_backports.layers.heads import kv_producers, layer_heads, widest_head_edits

from .test_r10_rule import outcome_on, profile_data

# As transformers 5.24 saves a Gemma 4 text model (per_layer_config, no global_head_dim).
GEMMA4 = {
    "architectures": ["Gemma4ForCausalLM"],
    "model_type": "gemma4_text",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "sliding_window": 12,
    "layer_types": ["sliding_attention", "full_attention"],
    "per_layer_config": {"1": {"head_dim": 64}},
}


def test_each_layer_reads_its_own_head_from_per_layer_config():
    assert layer_heads(GEMMA4) == [(32, 2), (64, 2)]


def test_a_config_with_global_head_dim_reads_as_transformers_5_derives_it():
    config = {k: v for k, v in GEMMA4.items() if k != "per_layer_config"}
    layers = ["sliding_attention"] * 5 + ["full_attention"]
    config.update(num_hidden_layers=6, layer_types=layers, global_head_dim=64, num_global_key_value_heads=1)
    assert layer_heads(config) == [(32, 2)] * 5 + [(64, 2)]  # global KV heads only with attention_k_eq_v
    assert layer_heads(dict(config, attention_k_eq_v=True))[-1] == (64, 1)
    del config["global_head_dim"]
    assert layer_heads(config)[-1] == (512, 2)  # transformers 5's default


def test_the_engine_head_becomes_the_widest_and_each_layer_keeps_its_own():
    edits = widest_head_edits(GEMMA4)
    assert edits == {"head_dim": 64, "per_layer_config": {"0": {"head_dim": 32}}}
    edited = dict(GEMMA4, **edits)
    assert layer_heads(edited) == layer_heads(GEMMA4) and widest_head_edits(edited) == {}


def test_the_engine_holds_the_most_kv_heads_and_fewer_repeat():
    # Gemma 4 31B: fewer KV heads on the full layers (kept as they are), and here the reverse.
    fewer = dict(GEMMA4, attention_k_eq_v=True, per_layer_config={"1": {"head_dim": 64, "num_key_value_heads": 1}})
    assert widest_head_edits(fewer) == {"head_dim": 64, "per_layer_config": {"0": {"head_dim": 32}, "1": {"num_key_value_heads": 1}}}
    more = dict(fewer, per_layer_config={"1": {"head_dim": 64, "num_key_value_heads": 4}})
    edits = widest_head_edits(more)
    assert edits == {"head_dim": 64, "num_key_value_heads": 4, "per_layer_config": {"0": {"head_dim": 32, "num_key_value_heads": 2}}}
    assert layer_heads(dict(more, **edits)) == layer_heads(more) == [(32, 2), (64, 4)]


def test_a_model_whose_head_is_already_the_widest_gets_no_edit():
    assert widest_head_edits(dict(GEMMA4, per_layer_config={})) == {}


@pytest.mark.parametrize("per_layer", [{"1": {"sliding_window": 4}}, {"7": {"head_dim": 64}}])
def test_overrides_it_cannot_serve_are_refused(per_layer):
    with pytest.raises(ValueError):
        layer_heads(dict(GEMMA4, per_layer_config=per_layer))


def test_shared_layers_read_the_last_earlier_layer_of_their_type():
    layers = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention", "sliding_attention"]
    config = dict(GEMMA4, num_hidden_layers=6, layer_types=layers, num_kv_shared_layers=3, per_layer_config={})
    assert kv_producers(config) == [None, None, None, 1, 2, 1]
    assert kv_producers(dict(config, num_kv_shared_layers=0)) == [None] * 6


@pytest.mark.parametrize("shared", [2, 6])
def test_sharing_without_a_layer_to_read_from_is_refused(shared):
    # 2: the shared full layer has no earlier full layer; 6: every layer would read from outside.
    layers = ["sliding_attention"] * 4 + ["full_attention"] * 2
    with pytest.raises(ValueError):
        kv_producers(dict(GEMMA4, num_hidden_layers=6, layer_types=layers, num_kv_shared_layers=shared))


def test_r10_writes_the_widest_head_and_h1_judges_it(tmp_path):
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, h1_head_size, r10_backport
    from common.engine.vllm_args import UserArgs

    from common.tests.helpers import model_dir

    [r10], _ = (o.repairs for o in outcome_on(profile_data("iluvatar-bi100"), GEMMA4, tmp_path))
    assert r10.config_edits == {"use_sliding_window": False, "head_dim": 64, "per_layer_config": {"0": {"head_dim": 32}}}
    model = ModelDir(str(model_dir(tmp_path / "h1", {"config.json": GEMMA4})))
    ctx = Context(model=model, profile=Profile(profile_data("iluvatar-bi100")), facts=gather_facts(model), user=UserArgs([]), env={})
    assert [r.code for r in h1_head_size.RULE.check(ctx).repairs] == ["H1"]  # 32 alone is outside the kernels' list
    r10_backport.RULE.check(ctx)
    assert ctx.config_edits["head_dim"] == 64 and h1_head_size.RULE.check(ctx).repairs == []  # the engine's head is 64
