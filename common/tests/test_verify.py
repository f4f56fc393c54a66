"""verify.run_checks: every check of a start in one engine-Python process that never imports torch."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from common.start.verify import run_checks

from common.tests.helpers import ROOT, model_dir, run_common

# The BI-100 engine venv: transformers 4.55.4 on Python 3.10, as on that card.
ENGINE055_PYTHON = ROOT / ".venv-engine055" / "bin" / "python"
AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"
ENGINES = [
    pytest.param(Path(sys.executable), id="transformers-4.57"),  # .venv, what nv-a100 ships
    pytest.param(ENGINE055_PYTHON, id="transformers-4.55.4"),  # iluvatar-bi100's
]
BAD_TIMEOUTS = ["inf", "nan", "-1", "1e300", "soon"]


def engine_env(env, python):
    if not Path(python).exists():
        target = "author-env" if ".venv-author" in str(python) else "engine055-env"
        pytest.skip(f"{python} is missing: run `make {target}`")
    return dict(env, COMPAT_ENGINE_PYTHON=str(python))


def counting_python(tmp_path, before_exec="", python=sys.executable):
    """An engine 'python' that appends one line per start (with the torch switches it was given)
    to a file, then runs the real interpreter."""
    record = tmp_path / "starts.txt"
    wrapper = tmp_path / "engine-python"
    run = before_exec or f'exec {python} "$@"'
    wrapper.write_text(
        f"#!/bin/sh\necho \"USE_TORCH=$USE_TORCH USE_TF=$USE_TF USE_FLAX=$USE_FLAX HF_HUB_OFFLINE=$HF_HUB_OFFLINE\" >> '{record}'\n{run}\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, lambda: record.read_text().splitlines() if record.exists() else []


@pytest.fixture(scope="module")
def overlay(models, tmp_path_factory):
    """What R3 + R3b write for the transformers-5 model: the fallback class, the list moved."""
    model = models("v5-generic")
    dest = tmp_path_factory.mktemp("overlay")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["additional_special_tokens"] = config.pop("extra_special_tokens")
    (dest / "tokenizer_config.json").write_text(json.dumps(config))
    (dest / "tokenizer.json").symlink_to(model / "tokenizer.json")
    return dest


def tokenizer_request(overlay, model):
    return {"kind": "tokenizer", "overlay": str(overlay), "model": str(model)}


def config_request(path, *attributes, trust_remote_code=False):
    return {"kind": "config", "path": str(path), "trust_remote_code": trust_remote_code, "attributes": list(attributes)}


@pytest.mark.parametrize("python", ENGINES)
def test_checks_leave_torch_out(python, models, overlay, env_for_tests):
    env = engine_env(env_for_tests, python)
    model = models("v5-generic")
    author = json.loads(Path(str(model) + ".author.json").read_text())
    tok, cfg = run_checks([tokenizer_request(overlay, model), config_request(model, "head_dim", "rope_theta", "nope")], env)
    assert tok.ok is True, tok.reason
    assert tok.result["class"] == "PreTrainedTokenizerFast"
    assert tok.result["special_ids"] == author["special_ids"]
    assert cfg.ok is True, cfg.reason
    assert (cfg.result["class"], cfg.result["model_type"]) == ("LlamaConfig", "llama")
    # The engine's 4.x reads a transformers-5 config without its rope_parameters: theta is lost.
    assert cfg.result["attributes"] == {"head_dim": 64, "rope_theta": 10000.0}
    assert "text_config" not in cfg.result
    for verdict in (tok, cfg):
        assert verdict.result["transformers"].startswith("4.")
        assert verdict.result["torch_loaded"] is False, f"the {verdict.result['kind']} check imported torch"


def test_transformers5_checks_work_without_torch(models, env_for_tests):
    """No card ships transformers 5 yet; when one does, its checks must still answer, torch-free."""
    env = engine_env(env_for_tests, AUTHOR_PYTHON)
    model = models("v5-generic")
    tok, cfg = run_checks([tokenizer_request(model, model), config_request(model, "head_dim", "torch_dtype")], env)
    assert tok.ok is True and tok.result["class"] == "TokenizersBackend", tok.reason
    assert cfg.ok is True and cfg.result["attributes"] == {"head_dim": 64, "torch_dtype": "bfloat16"}, cfg.reason
    assert tok.result["transformers"].startswith("5.")
    assert tok.result["torch_loaded"] is False and cfg.result["torch_loaded"] is False


def test_all_requests_of_a_start_share_one_process(models, overlay, tmp_path, env_for_tests):
    wrapper, starts = counting_python(tmp_path)
    caller_env = dict(os.environ)
    model = models("v5-generic")
    requests = [
        tokenizer_request(overlay, model),
        config_request(model, "head_dim"),
        {"kind": "no-such-check"},
        config_request(tmp_path / "nowhere"),
    ]
    verdicts = run_checks(requests, dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(wrapper)))
    assert [v.ok for v in verdicts] == [True, True, False, False]
    assert [v.result["index"] for v in verdicts] == [0, 1, 2, 3]
    assert "unknown check kind 'no-such-check'" in verdicts[2].reason
    assert "OSError" in verdicts[3].reason
    # torch, TF and Flax off and the hub offline in the child only; the caller's env is untouched.
    assert starts() == ["USE_TORCH=0 USE_TF=0 USE_FLAX=0 HF_HUB_OFFLINE=1"]
    assert dict(os.environ) == caller_env


def test_no_requests_start_nothing(tmp_path, env_for_tests):
    wrapper, starts = counting_python(tmp_path)
    assert run_checks([], dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(wrapper))) == []
    assert starts() == []


def test_clean_model_starts_no_check(models, tmp_path, env_for_tests):
    wrapper, starts = counting_python(tmp_path)
    proc = run_common(
        ["preflight", str(models("457-generic")), "--card", "nv-a100", "--dry-run", "--json"],
        dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(wrapper)),
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["repairs"] == [], proc.stderr
    assert starts() == []


@pytest.fixture(scope="module")
def config_answers(tmp_path_factory):
    """The config checks below, asked in one batch of the dev venv's transformers 4.57."""
    base = tmp_path_factory.mktemp("configs")
    marker = base / "remote" / "REMOTE-CODE-RAN"
    model_dir(
        base / "remote",
        {
            "config.json": {
                "model_type": "custom_thing",
                "architectures": ["CustomForCausalLM"],
                "auto_map": {"AutoConfig": "configuration_custom.CustomConfig"},
            },
            "configuration_custom.py": f"open({str(marker)!r}, 'w').close()\n"
            "from transformers import PretrainedConfig\n"
            "class CustomConfig(PretrainedConfig):\n    model_type = 'custom_thing'\n",
        },
    )
    model_dir(base / "unknown", {"config.json": {"model_type": "brand_new_arch", "hidden_size": 64}})
    model_dir(
        base / "mixtral",
        {
            "config.json": {
                "model_type": "mixtral",
                "architectures": ["MixtralForCausalLM"],
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "num_local_experts": 4,
            }
        },
    )
    model_dir(
        base / "llava",
        {
            "config.json": {
                "model_type": "llava",
                "architectures": ["LlavaForConditionalGeneration"],
                "text_config": {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "rope_theta": 5e5},
            }
        },
    )
    requests = [
        config_request(base / "remote", "head_dim"),
        config_request(base / "unknown"),
        config_request(base / "mixtral", "head_dim", "rope_theta", "torch_dtype"),
        config_request(base / "llava", "rope_theta", "head_dim"),
    ]
    remote, unknown, mixtral, llava = run_checks(requests, dict(os.environ, COMPAT_ENGINE_PYTHON=sys.executable))
    return base, marker, {"remote": remote, "unknown": unknown, "mixtral": mixtral, "llava": llava}


def test_remote_code_config_is_refused_without_trust(config_answers):
    _, marker, answers = config_answers
    verdict = answers["remote"]
    assert verdict.ok is False
    assert "trust_remote_code=True" in verdict.reason  # transformers' own words
    assert not marker.exists()  # the model's code never ran
    assert verdict.result["torch_loaded"] is False


def test_unknown_model_type_is_not_ok(config_answers):
    verdict = config_answers[2]["unknown"]
    assert verdict.ok is False and "brand_new_arch" in verdict.reason


def test_mixtral_head_dim_is_what_the_engine_reads(config_answers):
    from transformers import AutoConfig

    base, _, answers = config_answers
    verdict = answers["mixtral"]
    engine = AutoConfig.from_pretrained(str(base / "mixtral"))  # this process is the engine's 4.57
    assert verdict.ok is True and verdict.result["class"] == "MixtralConfig"
    assert "head_dim" in verdict.result["attributes"]  # present even when None: vLLM then derives it
    assert verdict.result["attributes"]["head_dim"] == engine.head_dim
    assert verdict.result["attributes"]["rope_theta"] == engine.rope_theta
    assert verdict.result["attributes"]["torch_dtype"] is None
    assert verdict.result["torch_loaded"] is False


def test_nested_text_config_is_read_too(config_answers):
    verdict = config_answers[2]["llava"]
    assert verdict.ok is True and verdict.result["model_type"] == "llava"
    assert "rope_theta" not in verdict.result["attributes"]
    text = verdict.result["text_config"]
    assert (text["class"], text["model_type"]) == ("LlamaConfig", "llama")
    assert text["attributes"] == {"rope_theta": 5e5, "head_dim": 32}


def test_no_engine_python_is_unverified(models, overlay, env_for_tests):
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON="/nonexistent/python")
    verdicts = run_checks([tokenizer_request(overlay, models("v5-generic")), config_request(overlay)], env)
    assert [v.ok for v in verdicts] == [None, None]
    assert "could not start /nonexistent/python" in verdicts[0].reason


def test_no_transformers_is_unverified(models, overlay, tmp_path, env_for_tests):
    wrapper, _ = counting_python(tmp_path, before_exec=f'exec {sys.executable} -S "$@"')  # no site-packages
    verdicts = run_checks(
        [tokenizer_request(overlay, models("v5-generic")), config_request(overlay)], dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(wrapper))
    )
    assert [v.ok for v in verdicts] == [None, None]
    assert all("transformers is not importable here" in v.reason for v in verdicts)


def test_child_that_dies_fails_what_it_did_not_answer(tmp_path, env_for_tests):
    wrapper, _ = counting_python(tmp_path, before_exec="echo 'engine exploded' >&2; exit 3")
    verdicts = run_checks([config_request(tmp_path), config_request(tmp_path)], dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(wrapper)))
    assert [v.ok for v in verdicts] == [False, False]
    assert verdicts[0].reason == "verification exited 3: engine exploded"


def test_time_limit_fails_every_unanswered_request(models, overlay, env_for_tests):
    env = dict(env_for_tests, COMPAT_VERIFY_TIMEOUT="0.01")
    verdicts = run_checks([tokenizer_request(overlay, models("v5-generic")), config_request(overlay)], env)
    assert [(v.ok, v.reason) for v in verdicts] == [(False, "verification timed out after 0.01s")] * 2


@pytest.mark.parametrize("value", BAD_TIMEOUTS)
def test_bad_timeout_keeps_the_verified_repairs(value, models, env_for_tests):
    """Before: inf, nan and 1e300 failed the preflight (every repair lost), -1 dropped the
    repairs that need a check as 'timed out' without saying why."""
    env = dict(env_for_tests, COMPAT_VERIFY_TIMEOUT=value, COMPAT_SKIP="R2,R4,R5,H1,R7")
    proc = run_common(["preflight", str(models("v5-generic")), "--card", "nv-a100", "--dry-run", "--json"], env)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert [(r["code"], r["verified"]) for r in plan["repairs"]] == [("R3", True), ("R3b", True)], proc.stderr
    assert plan["args"][0] == "--tokenizer"
    assert f"COMPAT_VERIFY_TIMEOUT={value!r} is not a number of seconds" in proc.stderr
    assert "USE_TORCH" not in plan["env"]
