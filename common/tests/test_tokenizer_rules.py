"""R3 and R3b on models saved by real transformers 5, verified with the engine's transformers 4.57."""

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from .helpers import model_dir, preflight_json, tree_digest


@pytest.fixture(autouse=True)
def only_rules_under_test(env_for_tests):
    """The other rules have their own tests; here they would only add unrelated repairs."""
    env_for_tests["COMPAT_SKIP"] = "R2,R4,R5,H1,H2,R7"


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


def test_missing_tokenizer_config_is_generated_when_engine_cannot_pick(models, env_for_tests, tmp_path):
    model = tmp_path / "noconfig"
    shutil.copytree(models("457-generic"), model)
    (model / "tokenizer_config.json").unlink()
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = "brand_new_arch"
    (model / "config.json").write_text(json.dumps(config))
    plan = preflight_json(model, env=env_for_tests)
    assert codes(plan) == ["R3b"] and plan["repairs"][0]["verified"] is True
    overlay = Path(plan["args"][1])
    assert json.loads((overlay / "tokenizer_config.json").read_text()) == {"tokenizer_class": "PreTrainedTokenizerFast"}


def test_missing_tokenizer_config_left_alone_when_model_type_maps(models, env_for_tests, tmp_path):
    model = tmp_path / "noconfig-llama"
    shutil.copytree(models("457-generic"), model)
    (model / "tokenizer_config.json").unlink()
    plan = preflight_json(model, env=env_for_tests)
    assert plan["repairs"] == []


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
