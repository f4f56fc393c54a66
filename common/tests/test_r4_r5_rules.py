"""R4 (architectures the engine does not register) and R5 (config values the engine's
transformers would silently lose), decided against each card's real engine profile."""

import json
from pathlib import Path

import pytest

from common.tests.helpers import launch, model_dir, preflight_json


@pytest.fixture(autouse=True)
def only_r4_r5(env_for_tests):
    env_for_tests["COMPAT_SKIP"] = "R2,R3,R3b,H1,H2,R7"


def llama(**extra):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "rope_theta": 10000.0,
        **extra,
    }


def repairs(plan, code):
    return [r for r in plan["repairs"] if r["code"] == code]


def findings(plan, code):
    return [f for f in plan["findings"] if f["code"] == code]


def overrides(plan):
    args = plan["args"] + plan["user_args"]
    return json.loads(args[args.index("--hf-overrides") + 1]) if "--hf-overrides" in args else None


# ---- R4 ------------------------------------------------------------------------------------


def test_registered_architecture_gets_nothing(tmp_path, env_for_tests):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": llama()}), env=env_for_tests)
    assert plan["repairs"] == [] and plan["findings"] == [] and plan["args"] == []


def test_class_transformers_has_is_left_to_vllms_own_fallback(tmp_path, env_for_tests):
    config = llama(architectures=["MinistralForCausalLM"], model_type="ministral")
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert plan["args"] == [] and repairs(plan, "R4") == []
    assert findings(plan, "R4")[0]["severity"] == "info" and "Transformers backend" in findings(plan, "R4")[0]["message"]


def test_unknown_class_of_a_known_model_type_targets_the_canonical_class(tmp_path, env_for_tests):
    config = llama(architectures=["TinyChatForCausalLM"])
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    [repair] = repairs(plan, "R4")
    assert repair["verified"] is True and "model_type 'llama'" in repair["detail"]
    assert overrides(plan) == {"architectures": ["LlamaForCausalLM"]}


def test_unknown_class_and_model_type_is_a_finding_without_arguments(tmp_path, env_for_tests):
    config = llama(architectures=["Qwen9ForCausalLM"], model_type="qwen9")
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert plan["args"] == [] and repairs(plan, "R4") == []
    [finding] = findings(plan, "R4")
    assert finding["severity"] == "error" and "Qwen9ForCausalLM" in finding["message"] and "newer engine" in finding["message"]


def test_users_hf_overrides_absorb_the_architecture(tmp_path, env_for_tests, fake_vllm):
    config = llama(architectures=["TinyChatForCausalLM"])
    model = model_dir(tmp_path / "m", {"config.json": config})
    user = ["--hf-overrides", '{"max_position_embeddings": 300}', "--port", "1"]
    _, called = fake_vllm
    assert launch(env_for_tests, model, user).returncode == 0
    argv = called()["argv"]
    assert argv.count("--hf-overrides") == 1
    assert json.loads(argv[argv.index("--hf-overrides") + 1]) == {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 300}


@pytest.mark.parametrize("value", ["LlamaForCausalLM", [], [1], {"a": 1}, [""]])
def test_malformed_architectures_is_a_finding(tmp_path, env_for_tests, value):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": llama(architectures=value)}), env=env_for_tests)
    assert plan["args"] == [] and "not a list of class names" in findings(plan, "R4")[0]["message"]


def r4_on(profile_data, config, tmp_path):
    """R4's outcome for `config` against a profile given as JSON (in-process)."""
    from common.engine.profile import Profile
    from common.engine.vllm_args import UserArgs
    from common.model.facts import gather_facts
    from common.model.modeldir import ModelDir
    from common.rules import Context, r4_architectures

    model = ModelDir(str(model_dir(tmp_path / "m", {"config.json": config})))
    ctx = Context(model=model, profile=Profile(profile_data), facts=gather_facts(model), user=UserArgs([]), env={})
    return r4_architectures.RULE.check(ctx)


def profile_data(card):
    from common.engine.profile import PROFILE_DIR

    with open(f"{PROFILE_DIR}/{card}.json", encoding="utf-8") as fh:
        return json.load(fh)


def test_a_profile_without_a_registry_snapshot_says_unverified(tmp_path):
    data = profile_data("nv-a100")
    data["engine"]["architectures"] = None
    outcome = r4_on(data, llama(architectures=["TinyChatForCausalLM"]), tmp_path)
    assert outcome.repairs == [] and [f.severity for f in outcome.findings] == ["unverified"]


def test_class_the_transformers_backend_refuses_is_an_error(tmp_path, env_for_tests):
    """T5: transformers 4.57 has the class, but is_backend_compatible() is False: vLLM 0.11 refuses."""
    config = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "d_model": 512, "num_heads": 8, "d_kv": 64}
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    [finding] = findings(plan, "R4")
    assert finding["severity"] == "error" and "is_backend_compatible() is False" in finding["message"]


def test_engine_without_a_transformers_backend_needs_the_class_in_its_registry(tmp_path):
    """On an engine with no Transformers backend (vLLM 0.5.5) a class transformers has is no help."""
    data = profile_data("nv-a100")
    data["engine"]["transformers_backend"] = False
    outcome = r4_on(data, llama(architectures=["MinistralForCausalLM"], model_type="ministral"), tmp_path)
    [finding] = outcome.findings
    assert finding.severity == "error" and "newer engine" in finding.message
    data["engine"]["architectures"] = [a for a in data["engine"]["architectures"] if a != "SmolLM3ForCausalLM"]
    smollm3 = llama(architectures=["SmolLM3ForCausalLM"], model_type="smollm3")
    [finding] = r4_on(data, smollm3, tmp_path / "q").findings
    assert finding.severity == "error" and "SmolLM3ForCausalLM" in finding.message and "newer engine" in finding.message


def test_renamed_class_on_an_engine_without_hf_overrides_is_served_through_a_model_view(tmp_path, env_for_tests):
    data = profile_data("nv-a100")
    data["engine"]["transformers_backend"] = False
    outcome = r4_on(data, llama(architectures=["TinyChatForCausalLM"]), tmp_path)
    [repair] = outcome.repairs
    assert repair.config_edits == {"architectures": ["LlamaForCausalLM"]} and repair.hf_overrides == {}


DEEPSEEK_AUTO_MAP = {
    "AutoConfig": "configuration_deepseek.DeepseekV3Config",
    "AutoModel": "modeling_deepseek.DeepseekV3Model",
    "AutoModelForCausalLM": "modeling_deepseek.DeepseekV3ForCausalLM",
}


def test_auto_map_to_the_models_own_classes_does_not_hide_the_registry(tmp_path):
    """vLLM looks its registry up whatever auto_map says: vLLM 0.5.5 (BI-100's profile) refuses
    DeepseekV3ForCausalLM although the config names its own modeling code; 0.11.0 registers it."""
    config = llama(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", auto_map=DEEPSEEK_AUTO_MAP)
    [finding] = r4_on(profile_data("iluvatar-bi100"), config, tmp_path / "bi100").findings
    assert finding.severity == "error" and "DeepseekV3ForCausalLM" in finding.message and "newer engine" in finding.message
    outcome = r4_on(profile_data("nv-a100"), config, tmp_path / "a100")
    assert outcome.findings == [] and outcome.repairs == []


def test_the_models_own_class_on_a_transformers_backend_is_unverified(tmp_path):
    """vLLM 0.11's Transformers backend loads the class auto_map names when no class of the list
    is registered and transformers has none of that name; whether it takes that class shows only
    at start. No repair replaces the model's own code there."""
    config = llama(architectures=["TinyOwnForCausalLM"], auto_map={"AutoModelForCausalLM": "modeling_tiny.TinyOwnForCausalLM"})
    outcome = r4_on(profile_data("nv-a100"), config, tmp_path / "a100")
    assert outcome.repairs == [] and [f.severity for f in outcome.findings] == ["unverified"]
    assert "modeling_tiny.TinyOwnForCausalLM" in outcome.findings[0].message
    # No backend (0.5.5): the model's code is never used; the model_type's class serves it.
    [repair] = r4_on(profile_data("iluvatar-bi100"), config, tmp_path / "bi100").repairs
    assert repair.config_edits == {"architectures": ["LlamaForCausalLM"]}


def test_r4_stands_back_where_only_the_models_code_reads_the_config(tmp_path):
    """Without --trust-remote-code the start stops at config.json (REMOTE_CODE's finding)."""
    config = llama(
        architectures=["TinyRemoteForCausalLM"], model_type="tiny_remote", auto_map={"AutoConfig": "configuration_tiny.TinyConfig"}
    )
    outcome = r4_on(profile_data("iluvatar-bi100"), config, tmp_path)
    assert outcome.findings == [] and outcome.repairs == []


# ---- R5 ------------------------------------------------------------------------------------

V5_ROPE = {"rope_type": "default", "rope_theta": 1000000.0}


def v5_config(**extra):
    config = llama(rope_parameters=dict(V5_ROPE), dtype="bfloat16", **extra)
    config.pop("rope_theta")
    return config


def test_rope_theta_inside_rope_parameters_is_restored_with_hf_overrides(tmp_path, env_for_tests):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": v5_config()}), env=env_for_tests)
    [repair] = repairs(plan, "R5")
    assert repair["hf_overrides"] == {"rope_theta": 1000000.0} and "rope_theta=1000000.0" in repair["detail"]
    assert overrides(plan) == {"rope_theta": 1000000.0}  # 4.57 reads `dtype`: not touched


def test_scaled_rope_restores_rope_scaling_too(tmp_path, env_for_tests):
    rope = {
        "rope_type": "llama3",
        "rope_theta": 500000.0,
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    config = v5_config()
    config["rope_parameters"] = rope
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert overrides(plan) == {"rope_theta": 500000.0, "rope_scaling": {k: v for k, v in rope.items() if k != "rope_theta"}}


def test_engine_without_hf_overrides_gets_its_own_flags(tmp_path, env_for_tests):
    """BI-100's vLLM (0.5.5 era) has no --hf-overrides, and its transformers 4.55 ignores `dtype`."""
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": v5_config()}), "iluvatar-bi100", env=env_for_tests)
    [repair] = repairs(plan, "R5")
    assert repair["args"] == ["--rope-theta", "1000000.0", "--dtype", "bfloat16"]
    assert "--hf-overrides" not in plan["args"]


def test_users_values_win(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": v5_config()})
    plan = preflight_json(model, vllm_args=['--hf-overrides={"rope_theta": 2.0}'], env=env_for_tests)
    assert plan["args"] == [] and plan["user_args"] == ['--hf-overrides={"rope_theta": 2.0}']
    plan = preflight_json(model, "iluvatar-bi100", vllm_args=["--dtype", "float16"], env=env_for_tests)
    assert plan["args"] == ["--rope-theta", "1000000.0"]


LLAVA_V5 = {
    "architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava",
    "dtype": "bfloat16",
    "text_config": {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 256,
        "num_attention_heads": 4,
        "rope_parameters": dict(V5_ROPE),
    },
    "vision_config": {"model_type": "clip_vision_model", "hidden_size": 64, "num_attention_heads": 2},
}


def test_nested_text_config_rope_goes_through_hf_config_path_whole(tmp_path, env_for_tests):
    """--hf-overrides would replace text_config wholesale: the repaired text_config is written
    into a config.json of its own, the model path kept, and the engine's AutoConfig (4.57 here)
    is asked what it reads for text_config.rope_theta."""
    model = model_dir(tmp_path / "m", {"config.json": LLAVA_V5, "generation_config.json": {"temperature": 0.3}})
    plan = preflight_json(model, env=env_for_tests)
    [repair] = repairs(plan, "R5")
    assert repair["verified"] is True, repair
    assert repair["config_edits"] == {"text_config": dict(LLAVA_V5["text_config"], rope_theta=1e6)}
    assert "text_config.rope_theta=1000000.0" in repair["detail"] and "--hf-overrides" not in plan["args"]
    directory = Path(plan["args"][plan["args"].index("--hf-config-path") + 1])
    written = json.loads((directory / "config.json").read_text())
    assert written["text_config"]["rope_theta"] == 1e6 and written["vision_config"] == LLAVA_V5["vision_config"]
    # vLLM reads generation_config.json from the same directory: the model's own is linked there.
    assert json.loads((directory / "generation_config.json").read_text()) == {"temperature": 0.3}
    assert plan["model_path"] == str(model) and plan["view"] is None


def test_nested_text_config_rope_goes_through_a_view_without_hf_config_path(tmp_path, env_for_tests):
    """BI-100's vLLM 0.5.5 has neither flag: a model view; its transformers 4.55 also loses `dtype`."""
    model = model_dir(tmp_path / "m", {"config.json": LLAVA_V5})
    plan = preflight_json(model, "iluvatar-bi100", env=env_for_tests)
    [repair] = repairs(plan, "R5")
    assert repair["config_edits"]["text_config"]["rope_theta"] == 1e6 and repair["config_edits"]["torch_dtype"] == "bfloat16"
    written = json.loads((Path(plan["view"]["path"]) / "config.json").read_text())
    assert written["text_config"]["rope_theta"] == 1e6 and written["torch_dtype"] == "bfloat16"


def test_malformed_nested_rope_is_a_finding_not_a_repair(tmp_path, env_for_tests):
    config = json.loads(json.dumps(LLAVA_V5))
    config["text_config"]["rope_parameters"]["rope_theta"] = "1e6"
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert repairs(plan, "R5") == [] and plan["args"] == []
    assert 'text_config.rope_parameters.rope_theta is "1e6"' in findings(plan, "R5")[0]["message"]


@pytest.mark.parametrize("rope", ["1e6", [1e6], {"rope_theta": "1e6"}, {"rope_theta": -1}, None])
def test_malformed_rope_parameters_change_nothing(tmp_path, env_for_tests, rope):
    config = v5_config()
    config["rope_parameters"] = rope
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert repairs(plan, "R5") == [] and plan["args"] == []


def test_config_saved_by_4_57_gets_nothing(models, env_for_tests):
    plan = preflight_json(models("457-generic"), env=env_for_tests)
    assert plan["repairs"] == [] and plan["args"] == []


def test_a_dtype_that_is_no_dtype_never_reaches_vllm(tmp_path, env_for_tests):
    """Red line 5: a model's string must not become a flag (`--dtype --trust-remote-code`)."""
    config = v5_config()
    config["dtype"] = "--trust-remote-code"
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), "iluvatar-bi100", env=env_for_tests)
    assert plan["args"] == ["--rope-theta", "1000000.0"]
    assert "--trust-remote-code" not in json.dumps(plan["repairs"])


@pytest.mark.parametrize("dtype, args", [("float32", []), ("float16", []), ("bfloat16", ["--dtype", "bfloat16"])])
def test_a_lost_dtype_is_restored_only_where_auto_would_pick_differently(tmp_path, env_for_tests, dtype, args):
    """transformers 4.55 reads no `dtype`: the engine takes the model for float32 and `auto`
    serves it in float16. A float32 or float16 model is served in float16 either way (restoring
    float32 would double its weight memory); only bfloat16 changes the engine's choice."""
    config = llama(dtype=dtype)
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), "iluvatar-bi100", env=env_for_tests)
    assert plan["args"] == args


# transformers 5's Qwen3-MoE: `num_local_experts`, which its class answers to as `num_experts`.
QWEN3_MOE_V5 = dict(
    v5_config(), architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe", head_dim=64, num_local_experts=4, num_experts_per_tok=2
)


def test_a_key_transformers5_renamed_is_restored_under_the_name_the_engine_reads(tmp_path, env_for_tests):
    """transformers 4.57 and 4.55 read `num_experts` only (default 128): restored through
    --hf-overrides on nv-a100, a model view on BI-100; transformers 5 (@next) reads both."""
    model = model_dir(tmp_path / "m", {"config.json": QWEN3_MOE_V5})
    assert overrides(preflight_json(model, env=env_for_tests))["num_experts"] == 4
    plan = preflight_json(model, "iluvatar-bi100", env=env_for_tests)
    [repair] = repairs(plan, "R5")
    assert repair["config_edits"] == {"num_experts": 4} and repair["verified"] is True, repair
    assert json.loads((Path(plan["view"]["path"]) / "config.json").read_text())["num_experts"] == 4
    assert repairs(preflight_json(model, "nv-a100@next", env=env_for_tests), "R5") == []


@pytest.mark.parametrize("value", [0, -1, "4", True, None])
def test_a_renamed_key_that_is_no_count_is_not_restored(tmp_path, env_for_tests, value):
    config = dict(QWEN3_MOE_V5, num_local_experts=value)
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert "num_experts" not in (overrides(plan) or {})
    assert any("num_local_experts is" in f["message"] for f in findings(plan, "R5")), plan["findings"]


def test_a_nested_config_holding_infinity_is_not_handed_on(tmp_path, env_for_tests):
    """Python's json reads NaN and Infinity from a config.json; the repaired text_config would
    carry them into the plan's JSON and a rewritten config.json, which strict JSON cannot hold:
    a finding names the value, and nothing is restored."""
    config = json.loads(json.dumps(LLAVA_V5))
    config["text_config"]["head_dim"] = float("inf")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))  # Infinity, as a hand-edited file has it
    plan = preflight_json(model, env=env_for_tests)
    assert repairs(plan, "R5") == [] and "--hf-config-path" not in plan["args"]
    [finding] = findings(plan, "R5")
    assert "text_config.head_dim is inf, which JSON cannot carry" in finding["message"], finding
    assert "text_config.rope_theta not restored" in finding["message"], finding
