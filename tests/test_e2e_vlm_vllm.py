"""End to end on real vLLM 0.11.0 (CPU): a tiny LLaVA saved by transformers 5 (build_vlm.py).

Issue 13's vision-language classes, each with its own "vanilla": the launcher with that class's
rule turned off (COMPAT_SKIP), so every other repair (the tokenizer overlay of R3/R3b) is there
and the start shows what the class alone does:
- R6 off: vLLM loads the processor from the model path, and the processor its tokenizer from
  there too, past `--tokenizer`: the start dies in the processor.
- R5 off: the language model's rope_theta 1e6 sits in text_config.rope_parameters, which
  transformers 4.57 ignores: the server runs and its greedy tokens differ from transformers 5's.
Through the full launcher both are repaired in one model view: the greedy tokens equal transformers
5's own `generate`, and an image+text chat answers 200.
"""

import base64
import json
from pathlib import Path

import pytest

from common.triage import triage_file
from tests.engine import ENGINE_BIN, engine_env, free_port, launcher_argv
from tests.fixtures.factory import author_record, build_vlm

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (ENGINE_BIN / "vllm").exists(), reason="no .venv-engine: run `make engine-env`"),
]

GREEDY = ["--dtype", "float32"]  # the reference tokens come from transformers 5's generate in float32


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    base = tmp_path_factory.mktemp("vlm")
    model = build_vlm(base / "llava", "--initializer-range", "0.1", "--reference-tokens", "16", "--png", str(base / "image.png"))
    return model, base / "image.png"


def launch(server, model: Path, work: Path, name: str, skip: str = ""):
    port = free_port()
    env = engine_env({"MODEL_DIR": str(model), "COMPAT_CARD": "nv-a100", "COMPAT_WORK_DIR": str(work), "COMPAT_SKIP": skip})
    return server(launcher_argv(port) + GREEDY, env, name)


def report(work: Path) -> dict:
    [path] = work.glob("run-*/report.json")
    return json.loads(path.read_text())


def test_the_model_is_in_transformers5_form(llava):
    model, _ = llava
    config = json.loads((model / "config.json").read_text())
    assert "rope_theta" not in config["text_config"] and config["text_config"]["rope_parameters"]["rope_theta"] == 1e6
    assert not (model / "preprocessor_config.json").exists()
    assert "image_processor" in json.loads((model / "processor_config.json").read_text())


def test_without_r6_the_processor_kills_the_start(llava, server, tmp_path):
    model, _ = llava
    srv = launch(server, model, tmp_path / "work", "no-r6", skip="R6")
    assert srv.wait_ready() is False and srv.wait_exit() != 0
    plan = report(tmp_path / "work")
    assert "--tokenizer" in plan["args"]  # the repaired tokenizer was there, and did not help
    log = srv.log()
    assert "RuntimeError: Failed to load the processor." in log
    assert "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported." in log
    assert triage_file(str(srv.log_path)).code == "R6"


def test_without_r5_the_text_model_runs_with_the_wrong_rope(llava, server, tmp_path):
    model, _ = llava
    author = author_record(model)
    srv = launch(server, model, tmp_path / "work", "no-r5", skip="R5")
    assert srv.wait_ready(), srv.log()[-3000:]
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got != author["reference_tokens"]
    assert triage_file(str(srv.log_path)).code == "unknown"  # wrong tokens, and no log line says so


def test_launcher_repairs_both_greedy_tokens_match_and_image_chat_answers(llava, server, tmp_path):
    model, image = llava
    author = author_record(model)
    srv = launch(server, model, tmp_path / "work", "launcher")
    assert srv.wait_ready(), srv.log()[-3000:]
    plan = report(tmp_path / "work")
    codes = [r["code"] for r in plan["repairs"]]
    assert codes == ["R6", "R3", "R3b", "R5"] and all(r["verified"] for r in plan["repairs"]), plan["repairs"]
    [r5] = [r for r in plan["repairs"] if r["code"] == "R5"]
    assert r5["config_edits"]["text_config"]["rope_theta"] == 1e6
    view = Path(plan["view"]["path"])
    assert set(plan["view"]["rewritten"]) == {"config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json"}
    assert f"model='{view}'" in srv.log() or f"'model': '{view}'" in srv.log()  # vLLM really serves the view
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    status, body = srv.image_chat(str(model), url, "what is in the picture?")
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > 16  # the 16 image tokens are in the prompt
    assert triage_file(str(srv.log_path)).code == "unknown"
