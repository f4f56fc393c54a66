"""What no repair fixes, said before the platform tries: remote code without the flag, a model
type the engine's transformers does not know, an adapter directory, a quantization method the
engine lacks; and doctor's verdicts on them."""

import json

import pytest

from common.tests.helpers import metadata_layer_passed, model_dir, preflight_json, run_common

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "num_attention_heads": 4}


def findings(plan, code):
    return [f for f in plan["findings"] if f["code"] == code]


def doctor(model, card="nv-a100", *args, env=None):
    result = run_common(["doctor", str(model), "--card", card, "--json", "--", *args], env)
    return result.returncode, json.loads(result.stdout) if result.stdout.strip() else result.stderr


@pytest.mark.parametrize(
    "files, why",
    [
        (
            {
                "config.json": dict(
                    LLAMA,
                    model_type="internlm2",
                    architectures=["InternLM2ForCausalLM"],
                    auto_map={"AutoConfig": "configuration_internlm2.InternLM2Config"},
                )
            },
            "maps AutoConfig to 'configuration_internlm2.InternLM2Config'",
        ),
        (
            {
                "config.json": LLAMA,
                "tokenizer_config.json": {
                    "tokenizer_class": "TikTokenTokenizer",
                    "auto_map": {"AutoTokenizer": ["tokenization_kimi.TikTokenTokenizer", None]},
                },
            },
            "maps AutoTokenizer to 'tokenization_kimi.TikTokenTokenizer'",
        ),
    ],
)
def test_remote_code_without_the_flag_fails_and_with_it_is_judged_as_usual(tmp_path, env_for_tests, files, why):
    model = model_dir(tmp_path / "m", files)
    code, data = doctor(model, env=env_for_tests)
    [finding] = findings(data, "REMOTE_CODE")
    assert code == 1 and data["verdict"] == "fails" and why in finding["message"]
    assert "--trust-remote-code" not in data["args"]  # never added by the image
    plan = preflight_json(model, vllm_args=["--trust-remote-code"], env=env_for_tests)
    assert findings(plan, "REMOTE_CODE") == [] and "--trust-remote-code" not in plan["args"]


def test_known_model_type_with_an_auto_map_uses_the_engines_own_class(tmp_path, env_for_tests):
    config = dict(LLAMA, auto_map={"AutoConfig": "configuration_llama.LlamaConfig"})
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert findings(plan, "REMOTE_CODE") == []


@pytest.mark.parametrize(
    "config, unknown",
    [
        # Types newer than any config class the image carries (R12 registers those it has).
        (dict(LLAMA, model_type="glm_moe_dsa", architectures=["GlmMoeDsaForCausalLM"]), "model_type 'glm_moe_dsa'"),
        (
            {
                "architectures": ["Mistral3ForConditionalGeneration"],
                "model_type": "mistral3",
                "text_config": {"model_type": "glm_moe_dsa"},
                "vision_config": {"model_type": "pixtral"},
            },
            "text_config.model_type 'glm_moe_dsa'",
        ),
    ],
)
def test_a_model_type_the_engines_transformers_lacks_fails(tmp_path, env_for_tests, config, unknown):
    model = model_dir(tmp_path / "m", {"config.json": config})
    code, data = doctor(model, env=env_for_tests)
    [finding] = findings(data, "CONFIG")[:1]
    assert code == 1 and unknown in finding["message"] and "newer engine" in finding["message"]


def test_doctor_asks_the_engines_autoconfig(tmp_path, env_for_tests):
    """A config the tables pass but the engine's transformers cannot read (a llama3 rope_scaling
    without its factor fails 4.57's validation on load): doctor's engine-side read catches it."""
    config = dict(LLAMA, rope_scaling={"rope_type": "llama3"})  # 4.57 validates rope_scaling on load
    code, data = doctor(model_dir(tmp_path / "m", {"config.json": config}), env=env_for_tests)
    assert code == 1 and any(f["code"] == "CONFIG" and "cannot read config.json" in f["message"] for f in data["findings"]), data[
        "findings"
    ]
    code, data = doctor(model_dir(tmp_path / "ok", {"config.json": LLAMA}), env=env_for_tests)
    assert code == 2 and metadata_layer_passed(data), data  # MB skipped: unverified


def test_doctor_without_an_engine_to_ask_is_unverified(tmp_path, env_for_tests):
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON="/nonexistent/python3")
    code, data = doctor(model_dir(tmp_path / "m", {"config.json": LLAMA}), env=env)
    assert code == 2 and data["verdict"] == "unverified" and "CONFIG" in data["unverified"]


def test_an_adapter_directory_is_named_as_one(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"adapter_config.json": {"base_model_name_or_path": "acme/base-7b", "peft_type": "LORA"}})
    code, data = doctor(model, env=env_for_tests)
    [finding] = findings(data, "ADAPTER")
    assert code == 1 and "adapter for base model 'acme/base-7b', not a model" in finding["message"]


def test_a_quantization_method_the_engine_lacks_fails_on_that_engine_only(tmp_path, env_for_tests):
    config = dict(LLAMA, quantization_config={"quant_method": "mxfp4"})
    model = model_dir(tmp_path / "m", {"config.json": config})
    bi100 = preflight_json(model, "iluvatar-bi100", env=env_for_tests)
    [finding] = findings(bi100, "QUANT")
    assert finding["severity"] == "error" and "'mxfp4' is not one vLLM 0.5.5 loads" in finding["message"]
    assert findings(preflight_json(model, "nv-a100", env=env_for_tests), "QUANT") == []
