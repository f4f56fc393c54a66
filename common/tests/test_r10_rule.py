"""R10: an architecture the engine lacks, served through the image's backport where the engine's
layer API (a profile fact read from its source) has what the backport calls; a clean model, and
every model on an engine that has the class, gets nothing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common.engine.profile import PROFILE_DIR, Profile
from common.rules.support.plugin import PLUGIN_DIR
from common.triage import triage_file
from common.vllm_plugin.compat_backports import BACKPORTS, BACKPORTS_055, BACKPORTS_V1, ENV, LAYERS_055, LAYERS_V1, fitting, written_for

from common.tests.helpers import ROOT, model_dir, modules_after_plan, only_rule, preflight_json

QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "torch_dtype": "bfloat16",
}


only_r10 = only_rule("R2,R3,R3b,R3c,R5,H1,H2,R7,R8,R9,MB", "only_r10")


def profile_data(card):
    with open(f"{PROFILE_DIR}/{card}.json", encoding="utf-8") as fh:
        return json.load(fh)


def outcome_on(data, config, tmp_path, env=None):
    """(R10's outcome, R4's outcome) for `config` against a profile given as JSON (in-process)."""
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, r4_architectures, r10_backport
    from common.engine.vllm_args import UserArgs

    model = ModelDir(str(model_dir(tmp_path / "m", {"config.json": config})))
    ctx = Context(model=model, profile=Profile(data), facts=gather_facts(model), user=UserArgs([]), env=env or {})
    return r10_backport.RULE.check(ctx), r4_architectures.RULE.check(ctx)


def stand_in_vllm(site: Path, layer_api) -> Path:
    """A vllm package under `site` defining each symbol of `layer_api` with its parameters (the
    source the engine-side check reads; nothing in it runs). The unit tier's Python has no vLLM."""
    files = {}
    for symbol, params in layer_api.items():
        path, _, dotted = symbol.partition(":")
        owner, _, method = dotted.partition(".")
        files.setdefault(path, {}).setdefault(owner, {})[method or "__init__"] = params
    for path, owners in files.items():
        lines = []
        for name, methods in owners.items():
            if name[0].islower():  # a function: its own parameters
                lines.append(f"def {name}({', '.join(methods['__init__'])}):\n    pass\n")
                continue
            lines.append(f"class {name}:")
            lines.extend(f"    def {m}(self{''.join(', ' + p for p in ps)}):\n        pass" for m, ps in methods.items())
            lines.append("")
        target = site / "vllm" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("\n".join(lines) + "\n")
    (site / "vllm" / "__init__.py").touch()
    return site


def test_bi100_gets_the_backport_through_the_plugin(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "qwen3", {"config.json": QWEN3})
    site = stand_in_vllm(tmp_path / "site", profile_data("iluvatar-bi100")["engine"]["layer_api"])
    plan = preflight_json(model, "iluvatar-bi100", env=dict(env_for_tests, PYTHONPATH=str(site)))
    [r10] = plan["repairs"]
    assert r10["code"] == "R10" and r10["verified"] is True, plan
    assert r10["env"] == {ENV: "Qwen3ForCausalLM:qwen3", "PYTHONPATH": PLUGIN_DIR}
    assert plan["env"][ENV] == "Qwen3ForCausalLM:qwen3" and plan["env"]["PYTHONPATH"].split(os.pathsep)[0] == PLUGIN_DIR
    assert plan["args"] == [] and not [f for f in plan["findings"] if f["severity"] in ("error", "unverified")], plan


def test_verification_asks_the_engines_own_vllm(tmp_path, env_for_tests):
    """The profile says the layer API fits; the engine's Python (here one whose vLLM is a stand-in
    lacking one parameter) says otherwise: the repair is dropped with the reason."""
    fake = tmp_path / "site" / "vllm" / "attention"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "layer.py").write_text("class Attention:\n    def __init__(self, num_heads, head_size, scale):\n        pass\n")
    env = dict(env_for_tests, PYTHONPATH=str(tmp_path / "site"))
    plan = preflight_json(model_dir(tmp_path / "qwen3", {"config.json": QWEN3}), "iluvatar-bi100", env=env)
    [r10] = plan["repairs"]
    assert r10["verified"] is False and ENV not in plan["env"], plan
    [finding] = [f for f in plan["findings"] if f["code"] == "R10"]
    assert finding["severity"] == "error" and "Attention(num_kv_heads)" in finding["message"], finding


@pytest.mark.parametrize(
    "config",
    [
        dict(QWEN3, architectures=["Ministral3ForCausalLM"], model_type="ministral3"),
        # Ministral 3 / Devstral Small 2 as published: the vision-language wrapper, served as text.
        {
            "architectures": ["Mistral3ForConditionalGeneration"],
            "model_type": "mistral3",
            "text_config": dict(QWEN3, model_type="ministral3"),
        },
    ],
)
def test_ministral3_and_its_wrapper_get_the_backport_on_bi100(tmp_path, config):
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.env == {ENV: f"{config['architectures'][0]}:ministral3"} and r10.findings == [] and r4.findings == []
    # Its YaRN rides on the engine's yarn rotary taking attn_factor: asked of the engine too.
    assert "attn_factor" in repair.engine_check["requires"]["model_executor/layers/rotary_embedding.py:YaRNScalingRotaryEmbedding"]


def test_an_engine_with_the_class_gets_nothing(tmp_path):
    data = profile_data("nv-a100")
    assert "Qwen3ForCausalLM" in data["engine"]["architectures"]
    r10, r4 = outcome_on(data, QWEN3, tmp_path)
    assert (r10.repairs, r10.findings, r4.repairs, r4.findings) == ([], [], [], [])


def test_clean_model_gets_nothing_and_reads_nothing(tmp_path):
    data = profile_data("iluvatar-bi100")
    data["engine"]["layer_api"] = "not read for a model the engine serves"  # would break a reader
    r10, _ = outcome_on(data, dict(QWEN3, architectures=["LlamaForCausalLM"], model_type="llama"), tmp_path)
    assert r10.repairs == [] and r10.findings == []


def test_a_layer_api_without_what_the_backport_calls_needs_a_newer_engine(tmp_path):
    """The generation after 0.5.5 passes one vllm_config to a model and keeps the KV cache out of
    attention's arguments: the backport does not fit, whatever the version says."""
    data = profile_data("iluvatar-bi100")
    data["engine"]["layer_api"]["attention/layer.py:Attention.forward"] = ["query", "key", "value", "output_shape"]
    del data["engine"]["layer_api"]["model_executor/model_loader/loader.py:build_model"]
    r10, r4 = outcome_on(data, QWEN3, tmp_path)
    [finding] = r10.findings
    assert r10.repairs == [] and finding.severity == "error" and "needs an engine of one of those generations" in finding.message
    assert "Attention.forward(kv_cache)" in finding.message and "build_model" in finding.message
    assert r4.findings == [] and r4.repairs == []  # one finding for one class: R10's


def test_a_profile_without_a_layer_api_says_unverified(tmp_path):
    data = profile_data("iluvatar-bi100")
    del data["engine"]["layer_api"]
    r10, _ = outcome_on(data, QWEN3, tmp_path)
    assert r10.repairs == [] and [f.severity for f in r10.findings] == ["unverified"]


@pytest.mark.parametrize(
    "change, env, expected",
    [
        ({"general_plugins": False}, {}, "error"),
        ({"general_plugins": None}, {}, "unverified"),
        ({}, {"VLLM_PLUGINS": "other"}, "error"),
        # Registering a class needs no weight iterator (R8 and R9 do).
        ({"weights_iterator_hook": False}, {}, None),
    ],
)
def test_the_plugin_must_run_in_the_engine(tmp_path, change, env, expected):
    data = profile_data("iluvatar-bi100")
    data["engine"].update(change)
    r10, _ = outcome_on(data, QWEN3, tmp_path, env)
    if expected is None:
        assert [r.code for r in r10.repairs] == ["R10"] and r10.findings == []
    else:
        assert r10.repairs == [] and [f.severity for f in r10.findings] == [expected]


def test_a_class_without_a_backport_is_still_r4s(tmp_path):
    data = profile_data("iluvatar-bi100")
    r10, r4 = outcome_on(data, dict(QWEN3, architectures=["SmolLM3ForCausalLM"], model_type="smollm3"), tmp_path)
    assert r10.repairs == [] and r10.findings == []
    [finding] = r4.findings
    assert finding.severity == "error" and "needs a newer engine" in finding.message


def test_every_backport_fits_the_bi100_profile_and_calls_only_probed_api():
    """The committed BI-100 profile (snapshotted from vLLM 0.5.5) has what every backport calls,
    and the snapshot probes every symbol a backport lists."""
    sys.path.insert(0, str(ROOT / "compat_build"))
    try:
        import snapshot_engine
    finally:
        sys.path.pop(0)
    profile = Profile(profile_data("iluvatar-bi100"))
    for arch, backport in BACKPORTS_055.items():
        assert fitting(arch, profile.layer_api) == (backport, []), arch
    for arch, generations in BACKPORTS.items():
        for backport in generations:
            assert set(backport.requires) <= set(snapshot_engine.LAYER_API), (arch, backport.module)
    assert set(LAYERS_055) <= set(snapshot_engine.LAYER_API)
    assert set(LAYERS_V1) <= set(snapshot_engine.LAYER_API)


@pytest.mark.parametrize("card", ["nv-a100", "hygon-k100"])
def test_each_generation_fits_its_own_engine_only(card):
    """R10 picks per engine the backport whose calls its layer API holds: the V1 engine's on the
    0.11 cards (snapshotted from vLLM 0.11), 0.5.5's on the BI-100; each generation's table calls
    something the other engine lacks, so neither fits the other's engine."""
    v1, bi100 = Profile(profile_data(card)), Profile(profile_data("iluvatar-bi100"))
    for arch, backport in BACKPORTS_V1.items():
        assert fitting(arch, v1.layer_api) == (backport, []), arch
        assert fitting(arch, bi100.layer_api) == (BACKPORTS_055[arch], []), arch
        assert written_for(arch) == ["vLLM 0.5.5's model API", "the V1 engine's model API (vLLM 0.11)"]
    for arch, backport in BACKPORTS_055.items():
        chosen, missing = fitting(arch, v1.layer_api)
        assert chosen is not backport or missing, arch  # the 0.5.5 model API is not the V1 engine's


def test_triage_names_r10_for_the_refusal_of_a_backported_class(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now. Supported architectures: [...]\n")
    assert triage_file(str(log)).code == "R10"
    log.write_text("ValueError: Model architectures ['SmolLM3ForCausalLM'] are not supported for now. Supported architectures: [...]\n")
    assert triage_file(str(log)).code == "R4"


def test_the_plugin_without_the_variable_imports_neither_torch_nor_vllm():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['vllm'] = None; "
        "import compat_plugin as p; p.register(); print(sorted(m for m in sys.modules if m.startswith('compat_backports.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=PLUGIN_DIR, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert proc.stdout.strip() == "[]", proc.stderr


def test_a_clean_start_never_imports_a_backport(env_for_tests):
    model = Path(ROOT) / "harness" / "fixtures" / "models" / "455-generic"
    plan_check = "p.args == [] and p.env == {}, (p.args, p.env)"
    modules = "sys.modules if 'backports.' in m or m in ('torch', 'vllm', 'ast')"
    assert modules_after_plan(model, "iluvatar-bi100", env_for_tests, plan_check, modules) == "[]"


EXAONE4 = {
    "architectures": ["Exaone4ForCausalLM"],
    "model_type": "exaone4",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "sliding_window": 12,
    "layer_types": ["sliding_attention", "full_attention"],
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize("window", [12, None], ids=["hybrid", "global"])
def test_exaone4_gets_its_backport_on_bi100(tmp_path, window):
    config = dict(EXAONE4, sliding_window=window)
    if window is None:
        config["layer_types"] = ["full_attention"] * 2
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.code == "R10" and repair.env[ENV] == "Exaone4ForCausalLM:exaone4" and r4.findings == []
    # Its windowed layers carry their own windows: the engine-wide one goes off, only where there is one.
    assert repair.config_edits == ({"use_sliding_window": False} if window else {})


def test_exaone4_needs_the_cache_config_that_carries_a_window(tmp_path):
    """Its layers' windows reach 0.5.5's Attention only through the cache config each is built
    with: an engine whose CacheConfig takes no window cannot serve them (Qwen3 still fits)."""
    data = profile_data("iluvatar-bi100")
    data["engine"]["layer_api"]["config.py:CacheConfig"] = ["block_size"]
    r10, _ = outcome_on(data, EXAONE4, tmp_path)
    [finding] = r10.findings
    assert r10.repairs == [] and finding.severity == "error" and "CacheConfig(sliding_window)" in finding.message
    r10, _ = outcome_on(data, QWEN3, tmp_path)
    assert [r.code for r in r10.repairs] == ["R10"]


def test_a_windowed_family_whose_config_names_no_window_still_gets_the_switch(tmp_path):
    """Gemma 3's config class gives a 4096 window when config.json names none: the engine would
    read that default as its model-wide window, so the switch goes into the config either way."""
    config = dict(QWEN3, architectures=["Gemma3ForCausalLM"], model_type="gemma3_text")
    r10, _ = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.config_edits == {"use_sliding_window": False}


# Mistral 7B v0.1 as published: one window over every layer, shorter than its positions.
MISTRAL_V01 = dict(
    QWEN3, architectures=["MistralForCausalLM"], model_type="mistral", head_dim=None, sliding_window=4096, max_position_embeddings=32768
)


GEMMA2_9B = dict(
    QWEN3,
    architectures=["Gemma2ForCausalLM"],
    model_type="gemma2",
    sliding_window=4096,
    max_position_embeddings=8192,
    attn_logit_softcapping=50.0,
    layer_types=["sliding_attention", "full_attention"] * 21,
)


@pytest.mark.parametrize(
    "config, module",
    [
        (MISTRAL_V01, "model_windows"),
        # Phi-3 mini 4k, Starcoder2 3B: their engine classes (the Llama class and its own) replaced alike.
        (
            dict(QWEN3, architectures=["Phi3ForCausalLM"], model_type="phi3", sliding_window=2047, max_position_embeddings=4096),
            "phi3",
        ),
        (
            dict(
                QWEN3, architectures=["Starcoder2ForCausalLM"], model_type="starcoder2", sliding_window=4096, max_position_embeddings=16384
            ),
            "model_windows",
        ),
        # A window on every other layer, which the engine's class drops (capping the context to it).
        (GEMMA2_9B, "gemma2"),
    ],
    ids=["mistral", "phi3", "starcoder2", "gemma2"],
)
def test_a_window_shorter_than_the_context_replaces_the_engines_class_on_bi100(tmp_path, config, module):
    """vLLM 0.5.5 has the class and serves the window otherwise than its author: the backport
    hands each layer its window, with the engine-wide window off."""
    arch = config["architectures"][0]
    assert arch in profile_data("iluvatar-bi100")["engine"]["architectures"]
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.env == {ENV: f"{arch}:{module}"} and repair.config_edits == {"use_sliding_window": False}, repair
    said = (
        "the configuration its own transformers writes"
        if module == "gemma2"
        else f"a sliding window of {config['sliding_window']} positions"
    )
    assert said in repair.detail and f"compat_backports.{module})" in repair.detail
    assert r10.findings == [] and r4.findings == [] and r4.repairs == []


@pytest.mark.parametrize("where", ["top", "rope_parameters"], ids=["saved-by-4", "saved-by-5"])
def test_phi4_mini_rotating_a_fraction_of_each_head_replaces_the_engines_phi3_on_bi100(tmp_path, where):
    """vLLM 0.5.5's Phi-3 (its Llama) rotates every dimension and refuses LongRoPE's factors for
    0.75 of the head: the backport rotates the fraction; no window here."""
    rope = {"rope_type": "longrope", "short_factor": [1.0] * 24, "long_factor": [1.0] * 24}
    config = dict(QWEN3, architectures=["Phi3ForCausalLM"], model_type="phi3", max_position_embeddings=131072)
    if where == "top":
        config.update(partial_rotary_factor=0.75, rope_scaling=rope)
    else:
        config["rope_parameters"] = dict(rope, rope_theta=10000.0, partial_rotary_factor=0.75)
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.env == {ENV: "Phi3ForCausalLM:phi3"} and "a rotary over 0.75 of each head" in repair.detail, repair.detail
    assert "compat_backports.phi3)" in repair.detail and r10.findings == [] and r4.findings == []
    # A Mistral rotating a fraction is not among what its backport replaces the engine's class for.
    r10, _ = outcome_on(profile_data("iluvatar-bi100"), dict(config, architectures=["MistralForCausalLM"], model_type="mistral"), tmp_path)
    assert r10.repairs == [] and r10.findings == []


def test_every_replacing_backport_names_only_traits_r10_reads():
    from common.vllm_plugin.compat_backports import REPLACED_FOR

    replacing = {arch: b.replaces for arch, generations in BACKPORTS.items() for b in generations if b.replaces}
    assert set(replacing) == {"MistralForCausalLM", "Phi3ForCausalLM", "Starcoder2ForCausalLM", "Gemma2ForCausalLM"}
    assert all(set(traits) <= set(REPLACED_FOR) for traits in replacing.values()), replacing


def test_every_gemma2_is_served_by_the_backport_on_bi100(tmp_path):
    """vLLM 0.5.5's own Gemma 2 reads `hidden_act`, which its transformers 4.55's Gemma2Config no
    longer has: whatever the window, the backport serves it."""
    for change in ({"sliding_window": None}, {"max_position_embeddings": 4096}):
        r10, _ = outcome_on(profile_data("iluvatar-bi100"), dict(GEMMA2_9B, **change), tmp_path)
        assert [r.env for r in r10.repairs] == [{ENV: "Gemma2ForCausalLM:gemma2"}], change


def test_gemma2_at_its_full_context_is_no_longer_capped_to_its_window_on_bi100(tmp_path, env_for_tests):
    """The engine would cap the context to the window (CTX); with the engine-wide window off by
    R10's backport, --max-model-len 8192 starts."""
    env_for_tests["COMPAT_SKIP"] += ",KV,C1"
    model = model_dir(tmp_path / "gemma2", {"config.json": GEMMA2_9B})
    plan = preflight_json(model, "iluvatar-bi100", vllm_args=["--max-model-len", "8192"], env=env_for_tests)
    assert [r["code"] for r in plan["repairs"]] == ["R10"] and not [f for f in plan["findings"] if f["code"] == "CTX"], plan
    # Where the backport cannot be registered, the engine's cap stands, and CTX says so.
    plan = preflight_json(model, "iluvatar-bi100", vllm_args=["--max-model-len", "8192"], env=dict(env_for_tests, VLLM_PLUGINS="other"))
    assert [f["severity"] for f in plan["findings"] if f["code"] == "CTX"] == ["error"], plan


@pytest.mark.parametrize(
    "change",
    [
        {"sliding_window": None},  # Mistral 7B v0.2 and later
        {"sliding_window": 32768},  # a window as long as the context never bites
        {"sliding_window": 262144, "max_position_embeddings": 131072},  # Phi-3 mini 128k
        {"use_sliding_window": False},  # the config's own switch
    ],
    ids=["no-window", "window-as-long", "window-longer", "switched-off"],
)
def test_the_engines_own_class_serves_every_other_configuration(tmp_path, change):
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), dict(MISTRAL_V01, **change), tmp_path)
    assert (r10.repairs, r10.findings, r4.repairs, r4.findings) == ([], [], [], [])


def test_a_window_the_platforms_context_never_reaches_needs_no_backport(tmp_path):
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, r10_backport
    from common.engine.vllm_args import UserArgs

    model = ModelDir(str(model_dir(tmp_path / "m", {"config.json": MISTRAL_V01})))
    for args, repaired in ((["--max-model-len", "4096"], False), (["--max-model-len", "8192"], True)):
        ctx = Context(model=model, profile=Profile(profile_data("iluvatar-bi100")), facts=gather_facts(model), user=UserArgs(args), env={})
        assert bool(r10_backport.RULE.check(ctx).repairs) is repaired, args


@pytest.mark.parametrize("card", ["nv-a100", "hygon-k100", "nv-a100@next"])
def test_engines_the_window_backport_is_not_written_for_keep_their_class(tmp_path, card):
    """vLLM 0.11 and the newest engine serve a model-wide window as the author (their cells say
    so); the backport, written against 0.5.5's layers, does not fit them and is not offered."""
    r10, r4 = outcome_on(profile_data(card), MISTRAL_V01, tmp_path)
    assert (r10.repairs, r10.findings, r4.repairs, r4.findings) == ([], [], [], [])


def test_triage_never_names_r10_for_an_engine_lacking_a_class_it_only_replaces(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("ValueError: Model architectures ['MistralForCausalLM'] are not supported for now. Supported architectures: [...]\n")
    assert triage_file(str(log)).code == "R4"


# Qwen3.5 as published (text and vision, the language model under text_config), shaped like the
# small checkpoints: Gated DeltaNet layers with full attention every fourth.
QWEN35_TEXT = {
    "model_type": "qwen3_5_text",
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
}
QWEN35 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": QWEN35_TEXT,
    "vision_config": {"model_type": "qwen3_5_vision", "depth": 2},
    "torch_dtype": "bfloat16",
}


def test_qwen35_gets_its_backport_on_bi100_started_without_cuda_graphs(tmp_path):
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), QWEN35, tmp_path)
    [repair] = r10.repairs
    assert repair.env[ENV] == "Qwen3_5ForConditionalGeneration:qwen3_5" and r4.findings == []
    # Its per-sequence state is indexed in Python each step: a CUDA graph would replay one batch's.
    assert repair.args == ["--enforce-eager"] and repair.config_edits == {}


def test_qwen35_needs_a_runner_that_hands_the_model_its_requests(tmp_path):
    """The CPU runner's input preparation must take the finished requests (where the plugin adds
    the request ids); an engine whose runner does not cannot keep a sequence's state."""
    data = profile_data("iluvatar-bi100")
    data["engine"]["layer_api"]["worker/cpu_model_runner.py:CPUModelRunner.prepare_model_input"] = ["seq_group_metadata_list"]
    r10, _ = outcome_on(data, QWEN35, tmp_path)
    [finding] = r10.findings
    assert r10.repairs == [] and finding.severity == "error" and "prepare_model_input(finished_requests_ids)" in finding.message


def test_qwen35_moe_gets_its_backport_on_the_engines_fused_moe(tmp_path):
    config = dict(
        QWEN35,
        architectures=["Qwen3_5MoeForConditionalGeneration"],
        model_type="qwen3_5_moe",
        text_config=dict(QWEN35_TEXT, model_type="qwen3_5_moe_text", num_experts=256, num_experts_per_tok=8),
    )
    r10, r4 = outcome_on(profile_data("iluvatar-bi100"), config, tmp_path)
    [repair] = r10.repairs
    assert repair.env[ENV] == "Qwen3_5MoeForConditionalGeneration:qwen3_5_moe" and repair.args == ["--enforce-eager"] and r4.findings == []
    assert "model_executor/layers/fused_moe/layer.py:FusedMoE" in repair.engine_check["requires"]


def qwen35_r10(tmp_path, args, card="iluvatar-bi100"):
    """R10's outcome for Qwen3.5 on `card` (the BI-100 by default) under the platform's `args`."""
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, r10_backport
    from common.engine.vllm_args import UserArgs

    model = ModelDir(str(model_dir(tmp_path / "m", {"config.json": QWEN35})))
    ctx = Context(model=model, profile=Profile(profile_data(card)), facts=gather_facts(model), user=UserArgs(args), env={})
    return r10_backport.RULE.check(ctx)


@pytest.mark.parametrize(
    "args, said",
    [
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size 3 (its 16 linear-attention key heads do not split over 3 ranks)"),
        (["-tp", "32"], "--tensor-parallel-size 32"),
        (["--pipeline-parallel-size", "2"], "--pipeline-parallel-size 2"),
        (["--enable-prefix-caching"], "--enable-prefix-caching"),
    ],
)
def test_qwen35_where_its_state_cannot_be_kept_fails_before_the_start(tmp_path, args, said):
    """The backport refuses these when the engine builds it; doctor and the preflight say so first."""
    outcome = qwen35_r10(tmp_path / "refused", args)
    [finding] = outcome.findings
    assert outcome.repairs == [] and finding.severity == "error" and said in finding.message, finding.message
    assert [r.code for r in qwen35_r10(tmp_path / "one", ["--tensor-parallel-size", "1"]).repairs] == ["R10"]


@pytest.mark.parametrize("args", [["--tensor-parallel-size", "2"], ["-tp", "4"], ["--tensor-parallel-size", "16"]])
def test_qwen35_shards_its_heads_over_the_ranks(tmp_path, args):
    """Each rank keeps whole heads' states: any size that divides the 16 key heads starts."""
    outcome = qwen35_r10(tmp_path, args)
    assert outcome.findings == [] and [r.args for r in outcome.repairs] == [["--enforce-eager"]]


@pytest.mark.parametrize("card", ["nv-a100", "hygon-k100"])
def test_qwen35_gets_its_v1_backport_on_the_011_cards_with_cuda_graphs(tmp_path, card):
    """On the V1 engine the states are the engine's (its mamba-style cache, its CUDA graphs): no
    --enforce-eager; the engine's own Qwen3-Next layers are asked of the engine before the start."""
    r10, r4 = outcome_on(profile_data(card), QWEN35, tmp_path)
    [repair] = r10.repairs
    assert repair.env[ENV] == "Qwen3_5ForConditionalGeneration:qwen3_5_v1" and r4.findings == [] and r10.findings == []
    assert repair.args == [] and repair.config_edits == {}
    assert "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet" in repair.engine_check["requires"]
    moe = dict(QWEN35_TEXT, architectures=["Qwen3_5MoeForCausalLM"], model_type="qwen3_5_moe_text", num_experts=256)
    [repair] = outcome_on(profile_data(card), moe, tmp_path / "moe")[0].repairs
    assert repair.env[ENV] == "Qwen3_5MoeForCausalLM:qwen3_5_moe_v1" and repair.args == []


@pytest.mark.parametrize(
    "args, said",
    [
        (["--tensor-parallel-size", "3"], "--tensor-parallel-size 3 (its 16 linear-attention key heads do not split over 3 ranks)"),
        (["--pipeline-parallel-size", "2"], "--pipeline-parallel-size 2"),
    ],
)
def test_qwen35_v1_refuses_what_its_backport_refuses(tmp_path, args, said):
    [finding] = qwen35_r10(tmp_path, args, "nv-a100").findings
    assert finding.severity == "error" and said in finding.message, finding.message


def test_qwen35_v1_serves_a_prefix_cache_start(tmp_path):
    """The V1 engine turns prefix caching off for a hybrid by itself (and serves it): no refusal."""
    outcome = qwen35_r10(tmp_path, ["--enable-prefix-caching", "-tp", "2"], "nv-a100")
    assert outcome.findings == [] and [(r.code, r.args) for r in outcome.repairs] == [("R10", [])]
