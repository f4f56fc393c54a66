"""R10 on the V1 engine's generation (vLLM 0.11: nv-a100, hygon-k100): the backports written for its
model API (BACKPORTS_V1) are the ones that fit its profiles, never 0.5.5's, and what they ask of
the engine differs from 0.5.5's: each layer hands its own window and head size to the engine's
Attention (no config edit), and a model whose windowed and full layers' KV pages differ in size
is started with the hybrid KV cache manager off. The backports themselves are proven by their
conformance cells on 0.11.0 (gemma4*, ministral3)."""

import pytest

from common.engine.profile import Profile
from common.rules.r10_backport import mixed_page_sizes
from common.vllm_plugin.compat_backports import BACKPORTS_055, BACKPORTS_V1, ENV, MODEL_API_V1, fitting
from common.vllm_plugin.compat_plugin import register_backports

from .test_backport_heads import GEMMA4
from .test_r10_rule import QWEN3, profile_data

V1_CARDS = ("nv-a100", "hygon-k100")
HYBRID_OFF = "--disable-hybrid-kv-cache-manager"


def r10_on(card, config, tmp_path, args=()):
    from common.engine.vllm_args import UserArgs
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, r10_backport

    from common.tests.helpers import model_dir

    model = ModelDir(str(model_dir(tmp_path / "m", {"config.json": config})))
    ctx = Context(model=model, profile=Profile(profile_data(card)), facts=gather_facts(model), user=UserArgs(list(args)), env={})
    return r10_backport.RULE.check(ctx), ctx


@pytest.mark.parametrize("card", V1_CARDS)
def test_the_v1_backports_fit_the_v1_profiles_and_the_055_ones_do_not(card):
    layer_api = Profile(profile_data(card)).layer_api
    for arch, backport in BACKPORTS_V1.items():
        assert fitting(arch, layer_api) == (backport, []), arch
        assert backport.generation == MODEL_API_V1
    for arch in BACKPORTS_055:
        # Every 0.5.5 backport misses a convention of this engine (the KV cache as attention's
        # argument, build_model): a family without a V1 backport gets none.
        chosen, missing = fitting(arch, layer_api)
        assert (chosen, missing) == (BACKPORTS_V1[arch], []) if arch in BACKPORTS_V1 else missing, arch


def test_the_bi100_profile_does_not_fit_the_v1_backports():
    layer_api = Profile(profile_data("iluvatar-bi100")).layer_api
    for arch, backport in BACKPORTS_V1.items():
        chosen, missing = fitting(arch, layer_api)
        assert chosen is BACKPORTS_055[arch] and missing == [], arch
        assert backport.requires.keys() - layer_api.keys() or any(
            set(params) - set(layer_api[symbol]) for symbol, params in backport.requires.items()
        ), arch


@pytest.mark.parametrize("card", V1_CARDS)
def test_gemma4_gets_its_v1_backport_and_no_config_edit(tmp_path, card):
    outcome, ctx = r10_on(card, GEMMA4, tmp_path)
    [repair] = outcome.repairs
    assert repair.env == {ENV: "Gemma4ForCausalLM:gemma4_v1"} and outcome.findings == []
    # Each layer takes its own window and head size: neither the window switch nor the widest head.
    assert repair.config_edits == {} and ctx.config_edits == {}
    # Its sliding (32 x 2) and full (64 x 2) layers' pages differ: one KV cache group.
    assert repair.args == [HYBRID_OFF] and "one KV cache group" in repair.detail
    assert set(repair.engine_check["requires"]) == set(BACKPORTS_V1["Gemma4ForCausalLM"].requires)


def test_the_hybrid_manager_stays_on_where_the_pages_are_one_size_or_the_user_said(tmp_path):
    # Four KV heads of 32 on the sliding layers, two of 64 on the full ones: one page size.
    same = dict(GEMMA4, num_key_value_heads=4, per_layer_config={"1": {"head_dim": 64, "num_key_value_heads": 2}})
    [repair] = r10_on("nv-a100", same, tmp_path / "same")[0].repairs
    assert repair.args == []
    # The user's word wins (red line 4), either way.
    for given in ([HYBRID_OFF], ["--no-disable-hybrid-kv-cache-manager"]):
        [repair] = r10_on("nv-a100", GEMMA4, tmp_path / given[0][2:], given)[0].repairs
        assert repair.args == [], given


def test_page_sizes_are_per_rank():
    assert mixed_page_sizes(GEMMA4, 1) == "full_attention [128]; sliding_attention [64] KV heads x head size a rank"
    # At TP 2 each rank holds one KV head of each kind: 32 against 64 still.
    assert mixed_page_sizes(GEMMA4, 2).startswith("full_attention [64]; sliding_attention [32]")
    one_kind = dict(GEMMA4, layer_types=["full_attention"] * 2, sliding_window=None)
    assert mixed_page_sizes(one_kind, 1) == ""  # one kind of layer: the manager takes differing pages
    assert mixed_page_sizes(dict(GEMMA4, per_layer_config={"9": {"head_dim": 64}}), 1) == ""  # unreadable: the backport refuses it


@pytest.mark.parametrize("card", V1_CARDS)
def test_ministral3_gets_its_v1_backport(tmp_path, card):
    config = dict(QWEN3, architectures=["Ministral3ForCausalLM"], model_type="ministral3")
    outcome, _ = r10_on(card, config, tmp_path)
    [repair] = outcome.repairs
    assert repair.env == {ENV: "Ministral3ForCausalLM:ministral3_v1"} and repair.args == [] and repair.config_edits == {}


def test_the_plugin_teaches_the_cpu_windows_only_to_055s_engine(monkeypatch):
    """compat_patches/cpu_windows.py is written for 0.5.5's torch_sdpa: a V1 backport with windows
    never installs it (its engine's Attention takes each layer's window)."""
    assert BACKPORTS_055["Gemma4ForCausalLM"].cpu_windows and not BACKPORTS_V1["Gemma4ForCausalLM"].cpu_windows
    assert BACKPORTS_055["Gemma4ForCausalLM"].widest_heads and not BACKPORTS_V1["Gemma4ForCausalLM"].widest_heads
    assert BACKPORTS_V1["Gemma4ForCausalLM"].one_cache_group and not BACKPORTS_055["Gemma4ForCausalLM"].one_cache_group
    from common.vllm_plugin import compat_plugin

    installed = []
    monkeypatch.setattr(compat_plugin.cpu_windows, "install", lambda log: installed.append(True))

    class Registry:
        @staticmethod
        def get_supported_archs():
            return set()

        @staticmethod
        def register_model(name, cls):
            pass

    import sys
    import types

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(ModelRegistry=Registry))
    for backport in (BACKPORTS_V1["Gemma4ForCausalLM"], BACKPORTS_055["Gemma4ForCausalLM"]):
        monkeypatch.setattr(type(backport), "load", lambda self: object)
        monkeypatch.setattr(compat_plugin, "_REGISTERED", set())  # each as a process of its own engine
        register_backports({ENV: backport.key})
    assert installed == [True]  # once: for the 0.5.5 backport only


def test_h1_judges_every_layers_own_head_on_the_v1_engine(tmp_path):
    """Gemma 4's published heads: 256 on the sliding layers, 512 on the full ones. On the V1
    engine each layer attends at its own, so the K100's FlashAttention paged kernel (up to 256)
    must be turned off for the 512 ones, though the config's head_dim is 256."""
    from common.rules import h1_head_size

    published = dict(GEMMA4, head_dim=256, per_layer_config={"1": {"head_dim": 512}})
    outcome, ctx = r10_on("hygon-k100", published, tmp_path)
    assert ctx.layer_heads == [(256, 2), (512, 2)] and ctx.whole_windows and ctx.config_edits == {}
    [repair] = h1_head_size.RULE.check(ctx).repairs
    assert repair.env == {"VLLM_USE_FLASH_ATTN_PA": "0"} and "head size 512 (a layer's own, of [256, 512])" in repair.detail
    # On the A100 the FLEX fallback takes it by itself: a note.
    _, ctx = r10_on("nv-a100", published, tmp_path / "a100")
    [note] = h1_head_size.RULE.check(ctx).findings
    assert note.severity == "info" and "head size 512" in note.message


def test_kv_counts_each_layers_own_cache_and_every_token_of_the_windows(tmp_path):
    """Gemma 4 31B's shape on the V1 engine: 16 KV heads of 256 on the sliding layers, 4 of 512 on
    the full ones (k=v), each layer's cache at its own shape, the windowed ones keeping every token
    (the hybrid manager off): what one request needs, as the engine's check counts it."""
    from common.memory.kv_cache import Budget, layout

    config = dict(
        GEMMA4,
        num_hidden_layers=6,
        head_dim=256,
        num_key_value_heads=16,
        attention_k_eq_v=True,
        sliding_window=1024,
        layer_types=["sliding_attention"] * 5 + ["full_attention"],
        per_layer_config={"5": {"head_dim": 512, "num_key_value_heads": 4}},
    )
    _, ctx = r10_on("nv-a100", config, tmp_path)
    assert ctx.layer_heads == [(256, 16)] * 5 + [(512, 4)] and ctx.whole_windows
    facts = Profile(profile_data("nv-a100")).memory
    lay = layout(config, facts, ctx.whole_windows, None, ctx.layer_heads)
    assert lay.kinds == ["full"] * 6
    needed = Budget(lay, "pages", 16, 1, 2, "auto", 8192).needed(4096, (0, 6))
    assert needed == 4096 * 2 * 2 * (5 * 16 * 256 + 4 * 512)
    # The config's one shape for every layer (16 KV heads of 256): the full layer counted wrong.
    plain = layout(config, facts, True)
    assert Budget(plain, "pages", 16, 1, 2, "auto", 8192).needed(4096, (0, 6)) == 4096 * 2 * 2 * 6 * 16 * 256
