"""R2: a chat template is added only when the model ships none anywhere transformers looks, the
served API is chat, and the user gave none; the written template renders with transformers."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.tests.helpers import launch, model_dir, preflight_json

CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@pytest.fixture(autouse=True)
def only_r2(env_for_tests):
    env_for_tests["COMPAT_SKIP"] = "R3,R3b,R4,R5,H1,H2,R7"


def r2(plan, key="repairs"):
    return [item for item in plan[key] if item["code"] == "R2"]


def render_with_transformers(tokenizer_dir: Path, template: Path) -> str:
    """The engine's transformers (4.57, .venv) applies the written template to a conversation."""
    code = (
        "import sys\nfrom transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "msgs = [{'role': 'user', 'content': 'hello there'}, {'role': 'assistant', 'content': 'hi'},"
        " {'role': 'user', 'content': 'bye'}]\n"
        "print(tok.apply_chat_template(msgs, chat_template=open(sys.argv[2]).read(), tokenize=False,"
        " add_generation_prompt=True), end='')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tokenizer_dir), str(template)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_model_without_template_gets_chatml_when_its_vocab_has_the_markers(models, env_for_tests):
    model = models("457-generic-notemplate")
    plan = preflight_json(model, env=env_for_tests)
    [repair] = r2(plan)
    assert repair["verified"] is True and "ChatML" in repair["detail"]
    assert plan["facts"]["chat_template_source"] is None
    assert plan["args"][0] == "--chat-template" and plan["args"][1].endswith("chat_template.jinja")
    text = render_with_transformers(model, Path(plan["args"][1]))
    assert text == (
        "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nhi<|im_end|>\n"
        "<|im_start|>user\nbye<|im_end|>\n<|im_start|>assistant\n"
    )


def test_vocabulary_without_chatml_gets_a_plain_template_with_its_own_bos_eos(models, env_for_tests, tmp_path):
    base = models("457-generic-notemplate")
    model = tmp_path / "plain"
    model.mkdir()
    tokenizer = json.loads((base / "tokenizer.json").read_text())
    for token in tokenizer["added_tokens"]:  # rename the markers: no ChatML in this vocabulary
        token["content"] = token["content"].replace("im_", "xx_")
    tokenizer["model"]["vocab"] = {k.replace("im_", "xx_"): v for k, v in tokenizer["model"]["vocab"].items()}
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((base / "tokenizer_config.json").read_text())
    config = {k: (v.replace("im_", "xx_") if isinstance(v, str) else v) for k, v in config.items() if k != "added_tokens_decoder"}
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "config.json").write_text((base / "config.json").read_text())
    plan = preflight_json(model, env=env_for_tests)
    [repair] = r2(plan)
    assert "plain role template" in repair["detail"] and repair["verified"] is True
    text = render_with_transformers(model, Path(plan["args"][1]))
    assert text == "<|endoftext|>User: hello there\nAssistant: hi<|xx_end|>\nUser: bye\nAssistant:"


@pytest.mark.parametrize(
    "files",
    [
        {"chat_template.jinja": CHATML},
        {"chat_template.json": {"chat_template": CHATML}},
        {"tokenizer_config.json": {"chat_template": CHATML}},
        {"tokenizer_config.json": {"chat_template": [{"name": "default", "template": CHATML}]}},
    ],
)
def test_a_template_anywhere_transformers_looks_means_nothing_is_added(tmp_path, env_for_tests, files):
    model = model_dir(tmp_path / "m", {"config.json": {"model_type": "llama"}, **files})
    plan = preflight_json(model, env=env_for_tests)
    assert r2(plan) == [] and r2(plan, "findings") == [] and plan["args"] == []


@pytest.mark.parametrize(
    "user, env, why",
    [
        (["--chat-template", "/t.jinja"], {}, "--chat-template is given"),
        (["--chat_template=/t.jinja"], {}, "--chat-template is given"),
        (["--runner", "pooling"], {}, "--runner pooling"),
        (["--task", "embed"], {}, "--task embed"),
        ([], {"COMPAT_CHAT_TEMPLATE": "off"}, "COMPAT_CHAT_TEMPLATE=off"),
    ],
)
def test_skipped_for_user_templates_pooling_and_opt_out(models, env_for_tests, user, env, why):
    plan = preflight_json(models("457-generic-notemplate"), vllm_args=user, env=dict(env_for_tests, **env))
    assert r2(plan) == [] and plan["args"] == []
    assert why in r2(plan, "findings")[0]["message"]


@pytest.mark.parametrize("where", ["chat_template.jinja", "tokenizer_config.json"])
def test_shipped_template_reaching_for_python_internals_is_reported_and_vllm_starts(tmp_path, env_for_tests, fake_vllm, where):
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    files = {"chat_template.jinja": evil} if where == "chat_template.jinja" else {"tokenizer_config.json": {"chat_template": evil}}
    model = model_dir(tmp_path / "m", {"config.json": {"model_type": "llama"}, **files})
    plan = preflight_json(model, env=env_for_tests)
    [finding] = r2(plan, "findings")
    assert finding["severity"] == "error" and "__class__" in finding["message"] and where in finding["message"]
    _, called = fake_vllm
    assert launch(env_for_tests, model, ["--port", "1"]).returncode == 0
    assert called()["argv"][1:] == ["serve", str(model), "--port", "1"]


def test_render_check_refuses_a_template_that_fails_or_escapes():
    from common.rules.r2_chat_template import render_check

    ok, why = render_check("{% for m in messages %}{{ m.content }}{% endfor %", {})
    assert not ok and "does not render" in why
    ok, why = render_check("{{ ''.__class__.__mro__[1].__subclasses__() }}", {})
    assert not ok and "SecurityError" in why
    ok, why = render_check("{{ messages[0]['content'] }}", {})
    assert not ok and "lacks" in why
