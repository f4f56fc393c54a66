"""R3 and R3b on models saved by real transformers 5, verified with the engine's transformers 4.57."""

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from common.tests.helpers import metadata_layer_passed, model_dir, preflight_json, run_common, tree_digest


@pytest.fixture(autouse=True)
def only_rules_under_test(env_for_tests):
    """The other rules have their own tests; here they would only add unrelated repairs."""
    env_for_tests["COMPAT_SKIP"] = "R2,R4,R5,H1,H2,R7,MB"


def codes(plan, key="repairs"):
    return [item["code"] for item in plan[key]]


def test_transformers5_generic_tokenizer_gets_both_repairs(models, env_for_tests):
    model = models("v5-generic")
    before = tree_digest(model)
    plan = preflight_json(model, env=env_for_tests)
    assert codes(plan) == ["R3", "R3b"]
    assert all(r["verified"] is True for r in plan["repairs"])
    assert plan["facts"]["tokenizer_class"] == "TokenizersBackend"
    assert plan["facts"]["tokenizer_kind"] == "fast"
    overlay = Path(plan["args"][1])
    assert plan["args"] == ["--tokenizer", str(overlay)] and plan["env"] == {}
    rewritten = json.loads((overlay / "tokenizer_config.json").read_text())
    assert rewritten["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "extra_special_tokens" not in rewritten
    assert rewritten["additional_special_tokens"] == ["<|tool_call|>", "<|tool_result|>"]
    assert (overlay / "tokenizer.json").is_symlink() and (overlay / "config.json").is_symlink()
    assert not list(overlay.glob("*.safetensors"))  # a tokenizer overlay links what a tokenizer reads, never weights
    assert tree_digest(model) == before  # red line 1
    # The overlay loads in the engine's transformers with every id the author's tokenizer had.
    author = json.loads(Path(str(model) + ".author.json").read_text())
    tok = AutoTokenizer.from_pretrained(overlay)
    assert {t: tok.convert_tokens_to_ids(t) for t in author["special_ids"]} == author["special_ids"]
    assert tok.encode(author["probe"], add_special_tokens=False) == author["probe_ids"]


def test_transformers5_known_class_with_list_gets_r3_only(models, env_for_tests):
    plan = preflight_json(models("v5-qwen2"), env=env_for_tests)
    assert plan["facts"]["tokenizer_class"] == "Qwen2Tokenizer"
    assert codes(plan) == ["R3"] and plan["repairs"][0]["verified"] is True


def test_clean_model_gets_nothing(models, env_for_tests):
    plan = preflight_json(models("457-generic"), env=env_for_tests)
    assert plan["repairs"] == [] and plan["args"] == [] and plan["env"] == {}
    assert plan["findings"] == []


def test_user_tokenizer_wins(models, env_for_tests):
    plan = preflight_json(models("v5-generic"), vllm_args=["--tokenizer", "/their/tokenizer"], env=env_for_tests)
    assert plan["repairs"] == [] and plan["args"] == []
    assert {f["code"] for f in plan["findings"]} == {"R3", "R3b"}
    assert all("own --tokenizer" in f["message"] for f in plan["findings"])


def test_repair_that_fails_verification_is_dropped(models, env_for_tests, tmp_path):
    # A tokenizer.json whose special token ids disagree with what the config claims can't verify:
    # take the v5 model and make the vocabulary's special token unknown to the tokenizer.
    model = tmp_path / "broken"
    shutil.copytree(models("v5-generic"), model)
    data = json.loads((model / "tokenizer.json").read_text())
    data["model"]["type"] = "NotAModel"
    (model / "tokenizer.json").write_text(json.dumps(data))
    plan = preflight_json(model, env=env_for_tests)
    assert codes(plan) == ["R3", "R3b"]
    assert all(r["verified"] is False for r in plan["repairs"])
    assert plan["args"] == []
    assert any(f["severity"] == "error" and "dropped: verification failed" in f["message"] for f in plan["findings"])


def test_no_engine_transformers_means_no_unverified_repair(models, env_for_tests):
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON="/nonexistent/python")
    plan = preflight_json(models("v5-generic"), env=env)
    assert plan["args"] == [] and all(r["verified"] is None for r in plan["repairs"])
    assert any("verification unavailable" in f["message"] for f in plan["findings"])


def test_remote_code_tokenizer_is_reported_not_rewritten(tmp_path, env_for_tests):
    model = model_dir(
        tmp_path / "m",
        {
            "config.json": {"model_type": "custom", "architectures": ["CustomForCausalLM"]},
            "tokenizer_config.json": {
                "tokenizer_class": "CustomTokenizer",
                "extra_special_tokens": ["<a>"],
                "auto_map": {"AutoTokenizer": ["tokenization_custom.CustomTokenizer", None]},
            },
            "tokenization_custom.py": "class CustomTokenizer: pass\n",
        },
    )
    plan = preflight_json(model, env=env_for_tests)
    assert plan["repairs"] == [] and plan["args"] == []
    assert all("remote-code tokenizer" in f["message"] for f in plan["findings"] if f["code"] in ("R3", "R3b"))
    assert {"R3", "R3b"} <= {f["code"] for f in plan["findings"]}


def without_tokenizer_config(models, tmp_path, keep_special_tokens_map=False, **config_changes):
    """457-generic as an export that ships tokenizer.json alone."""
    model = tmp_path / "noconfig"
    shutil.copytree(models("457-generic"), model)
    (model / "tokenizer_config.json").unlink()
    if not keep_special_tokens_map:
        (model / "special_tokens_map.json").unlink()
    config = json.loads((model / "config.json").read_text())
    config.update(config_changes)
    (model / "config.json").write_text(json.dumps(config))
    return model


@pytest.mark.parametrize("model_type", ["llama", "brand_new_arch"])
def test_missing_tokenizer_config_is_written_from_the_models_ids(models, env_for_tests, tmp_path, model_type):
    """4.57 would load a Llama's tokenizer.json as LlamaTokenizerFast (BOS prepended, `<s>` and
    `</s>` invented past the vocabulary), an unmapped model_type not at all."""
    model = without_tokenizer_config(models, tmp_path, model_type=model_type, pad_token_id=1)
    plan = preflight_json(model, env=env_for_tests)
    assert codes(plan) == ["R3c"] and plan["repairs"][0]["verified"] is True, plan
    overlay = Path(plan["args"][plan["args"].index("--tokenizer") + 1])
    written = json.loads((overlay / "tokenizer_config.json").read_text())
    # The ids of config.json (bos 0, eos 2, pad 1) as tokenizer.json names them.
    assert written == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|im_start|>",
    }
    assert not (model / "tokenizer_config.json").exists()  # the model is never written


def test_missing_tokenizer_config_on_a_transformers5_engine_gets_nothing(models, env_for_tests, tmp_path):
    """transformers 5.19 (nv-a100@next) loads tokenizer.json alone as written ([388, 367] for
    "hello world", no invented <s>): the model is clean there and gets no argument."""
    model = without_tokenizer_config(models, tmp_path)
    plan = preflight_json(model, "nv-a100@next", env=env_for_tests)
    assert [r for r in plan["repairs"] if r["code"] == "R3c"] == [] and "--tokenizer" not in plan["args"]


def test_missing_tokenizer_config_with_special_tokens_map_names_the_class_only(models, env_for_tests, tmp_path):
    model = without_tokenizer_config(models, tmp_path, keep_special_tokens_map=True)
    plan = preflight_json(model, env=env_for_tests)
    assert codes(plan) == ["R3c"] and plan["repairs"][0]["verified"] is True
    overlay = Path(plan["args"][plan["args"].index("--tokenizer") + 1])
    assert json.loads((overlay / "tokenizer_config.json").read_text()) == {"tokenizer_class": "PreTrainedTokenizerFast"}
    assert (overlay / "special_tokens_map.json").is_symlink()


def test_missing_tokenizer_config_ids_not_in_the_vocabulary_are_left_unset(models, env_for_tests, tmp_path):
    model = without_tokenizer_config(models, tmp_path, bos_token_id=10**6, eos_token_id=[2, 1], pad_token_id="0")
    plan = preflight_json(model, env=env_for_tests)
    [repair] = plan["repairs"]
    assert repair["code"] == "R3c" and repair["verified"] is True
    assert "(bos_token_id 1000000, pad_token_id '0' not in tokenizer.json: left unset)" in repair["detail"]
    overlay = Path(plan["args"][plan["args"].index("--tokenizer") + 1])
    # A list of eos ids gives its first; a string is not an id.
    assert json.loads((overlay / "tokenizer_config.json").read_text()) == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
    }


def test_missing_tokenizer_config_user_tokenizer_is_left_alone(models, env_for_tests, tmp_path):
    model = without_tokenizer_config(models, tmp_path)
    plan = preflight_json(model, vllm_args=["--tokenizer", str(models("457-generic"))], env=env_for_tests)
    assert plan["repairs"] == [] and plan["args"] == []
    [finding] = [f for f in plan["findings"] if f["code"] == "R3c"]
    assert finding["severity"] == "warning" and "own --tokenizer" in finding["message"]


def test_doctor_verifies_r3c_with_the_engines_transformers(models, env_for_tests, tmp_path):
    model = without_tokenizer_config(models, tmp_path)
    result = run_common(["doctor", str(model), "--card", "nv-a100", "--json"], env_for_tests)
    data = json.loads(result.stdout)
    assert result.returncode == 2 and metadata_layer_passed(data), data  # MB skipped: unverified
    [repair] = [r for r in data["repairs"] if r["code"] == "R3c"]
    assert repair["verified"] is True and "ids match" in repair["verification"], repair


def test_tiktoken_unknown_class_is_a_finding(tmp_path, env_for_tests):
    model = model_dir(
        tmp_path / "m",
        {
            "tokenizer_config.json": {"tokenizer_class": "TiktokenTokenizer"},
            "tokenizer.tiktoken": "aGVsbG8= 0\n",
        },
    )
    plan = preflight_json(model, env=env_for_tests)
    assert plan["repairs"] == []
    [finding] = [f for f in plan["findings"] if f["code"] == "R3b"]
    assert finding["severity"] == "error" and "tiktoken" in finding["message"]


@pytest.mark.parametrize(
    "tokenizer_json, token_id, text",
    [
        ({"added_tokens": [{"id": 7, "content": "<x>"}], "model": {"vocab": {"<x>": 3}}}, 7, "<x>"),  # added first
        ({"model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["a", -1.0]]}}, 1, "a"),
        ({"model": {"vocab": {"a": True, "b": 1}}}, 1, "b"),  # a boolean is not an id
        ({"added_tokens": 5, "model": 3}, 0, None),  # wrong types anywhere: no text, no exception
        ({"added_tokens": "abc", "model": {"vocab": [[], "x", [1]]}}, 1, None),
        ({"model": {"vocab": {"a": 0}}}, True, None),
        ({"model": {"vocab": {"a": 0}}}, -1, None),
    ],
)
def test_token_for_id_reads_what_tokenizer_json_holds_and_never_raises(tokenizer_json, token_id, text):
    from common.model.tokenizer_files import token_for_id

    assert token_for_id(tokenizer_json, token_id) == text
