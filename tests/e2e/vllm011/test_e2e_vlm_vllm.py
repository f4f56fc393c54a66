"""End to end on real vLLM 0.11.0 (CPU): a tiny LLaVA saved by transformers 5 (build_vlm.py).

Issue 13's vision-language classes, each with its own "vanilla":
- the tokenizer overlay alone (`--tokenizer`, as the preflight made it): vLLM loads the processor
  from the model path, and the processor its tokenizer from there too, past `--tokenizer`: the
  start dies in the processor. Shown on the processor in transformers 4.x form (4.57 reads the
  nested form too: the tokenizer is what kills it either way).
- R5 off (the launcher with COMPAT_SKIP=R5): the language model's rope_theta 1e6 sits in
  text_config.rope_parameters, which transformers 4.57 ignores: the server runs and its greedy
  tokens differ from transformers 5's.
Through the full launcher both are repaired in one model view (the tokenizer overlay's files laid
into it, whatever form the processor files are in): the greedy tokens equal transformers 5's own
`generate`, and an image+text chat answers 200.
"""

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from common.triage import triage_file
from harness.engine import ENGINE_0110, ENGINE_BIN, ROOT, engine_env, free_port, serve_argv_vanilla
from harness.fixtures.factory import author_record, build_vlm

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


def test_the_model_is_in_transformers5_form(llava):
    model, _ = llava
    config = json.loads((model / "config.json").read_text())
    assert "rope_theta" not in config["text_config"] and config["text_config"]["rope_parameters"]["rope_theta"] == 1e6
    assert not (model / "preprocessor_config.json").exists()
    assert "image_processor" in json.loads((model / "processor_config.json").read_text())


def test_without_r5_the_text_model_runs_with_the_wrong_rope(llava, launched, tmp_path):
    """Wrong tokens, and no log line says so (the fixture: triage claims nothing)."""
    model, _ = llava
    author = author_record(model)
    srv, _ = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY, env={"COMPAT_SKIP": "R5"}, name="no-r5")
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got != author["reference_tokens"]


def test_launcher_repairs_both_greedy_tokens_match_and_image_chat_answers(llava, launched, tmp_path):
    model, image = llava
    author = author_record(model)
    srv, plan = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY)
    codes = [r["code"] for r in plan["repairs"]]
    # No R6: transformers 4.57 reads the nested processor_config.json (the profile's fact); the view
    # holds the tokenizer overlay's files because the processor loads its tokenizer from it.
    assert codes == ["R3", "R3b", "R5"] and all(r["verified"] for r in plan["repairs"]), plan["repairs"]
    [r5] = [r for r in plan["repairs"] if r["code"] == "R5"]
    assert r5["config_edits"]["text_config"]["rope_theta"] == 1e6
    view = Path(plan["view"]["path"])
    assert set(plan["view"]["rewritten"]) == {"config.json", "tokenizer_config.json"} and plan["view"]["codes"] == codes
    assert f"model='{view}'" in srv.log() or f"'model': '{view}'" in srv.log()  # vLLM really serves the view
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    status, body = srv.image_chat(str(model), url, "what is in the picture?")
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > 16  # the 16 image tokens are in the prompt


@pytest.fixture(scope="module")
def llava_4x(llava, tmp_path_factory):
    """The same model with its processor in transformers 4.x form, written from the nested keys by
    code (build_vlm.py saves with transformers 5): preprocessor_config.json with the image
    processor, processor_config.json with the processor's own arguments. The tokenizer stays in
    transformers 5 form (TokenizersBackend, a list extra_special_tokens)."""
    source, image = llava
    model = tmp_path_factory.mktemp("vlm-4x") / "llava"
    shutil.copytree(source, model)
    nested = json.loads((model / "processor_config.json").read_text())
    image_processor = dict(nested.pop("image_processor"), processor_class=nested["processor_class"])
    (model / "preprocessor_config.json").write_text(json.dumps(image_processor, indent=2))
    (model / "processor_config.json").write_text(json.dumps(nested, indent=2))
    return model, image


def test_a_4x_processor_dies_on_the_v5_tokenizer_past_the_repaired_tokenizer(llava_4x, server, tmp_path):
    """vLLM 0.11 with the preflight's tokenizer overlay passed by --tokenizer only (what the
    launcher did before the overlay reached the view): the processor still loads its tokenizer
    from the model path and kills the start."""
    model, _ = llava_4x
    argv = [str(ENGINE_0110.python), "-m", "common", "preflight", str(model), "--card", "nv-a100", "--dry-run", "--keep-work-dir", "--json"]
    done = subprocess.run(argv, env=engine_env({"COMPAT_WORK_DIR": str(tmp_path / "work")}), cwd=ROOT, capture_output=True, text=True)
    plan = json.loads(done.stdout)
    assert plan["view"] and plan["view"]["rewritten"] == ["config.json", "tokenizer_config.json"], plan["view"]
    tokenizer = plan["args"][plan["args"].index("--tokenizer") + 1]
    srv = server(serve_argv_vanilla(model, free_port()) + GREEDY + ["--tokenizer", tokenizer], engine_env(), "tokenizer-alone")
    assert srv.wait_ready() is False and srv.wait_exit() != 0
    log = srv.log()
    assert "RuntimeError: Failed to load the processor." in log
    assert "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported." in log
    assert triage_file(str(srv.log_path)).code == "R6"


def test_launcher_serves_a_4x_processor_with_a_v5_tokenizer_from_the_view(llava_4x, launched, tmp_path):
    model, image = llava_4x
    srv, plan = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY, name="launcher-4x")
    codes = [r["code"] for r in plan["repairs"]]
    assert codes == ["R3", "R3b", "R5"] and all(r["verified"] for r in plan["repairs"]), plan["repairs"]
    # The model's own legacy processor files are linked; the tokenizer overlay's file is rewritten.
    assert set(plan["view"]["rewritten"]) == {"config.json", "tokenizer_config.json"} and plan["view"]["codes"] == codes
    [r3b] = [r for r in plan["repairs"] if r["code"] == "R3b"]
    assert "the processor loads as LlavaProcessor (image_processor CLIPImageProcessor)" in r3b["verification"]
    view = Path(plan["view"]["path"])
    assert (view / "preprocessor_config.json").is_symlink()
    assert f"model='{view}'" in srv.log() or f"'model': '{view}'" in srv.log()  # vLLM really serves the view
    url = "data:image/png;base64," + base64.b64encode(image.read_bytes()).decode()
    status, body = srv.image_chat(str(model), url, "what is in the picture?")
    assert status == 200, body
    assert body["usage"]["prompt_tokens"] > 16  # the 16 image tokens are in the prompt
