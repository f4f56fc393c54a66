"""End to end on real vLLM 0.11.0 (CPU): a transformers-5 model kills vanilla vLLM and serves
through the launcher with the author's token ids; a clean model gets nothing and serves; R2,
R3c, R4 and R5 each fail (or silently go wrong) on vanilla vLLM and are right through the
launcher, R4 and R5 to the greedy token against transformers' own generate on the same weights."""

import json
import shutil
from pathlib import Path

import pytest

from common.triage import triage_file
from harness.fixtures.factory import author_record, build
from harness.engine import ENGINE_0110, ENGINE_BIN, Server, engine_env, free_port, serve_argv_vanilla

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (ENGINE_BIN / "vllm").exists(), reason="no .venv-engine: run `make engine-env`"),
]


def chat_and_complete(srv: Server, model: Path) -> None:
    status, body = srv.chat(str(model))
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    status, body = srv.complete(str(model))
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4


def triaged(path: Path) -> str:
    """The code `triage` gives a log the engine really wrote."""
    return triage_file(str(path)).code


@pytest.mark.parametrize(
    "variant, line, code",
    [
        ("v5-generic", "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.", "R3b"),
        ("v5-qwen2", "AttributeError: 'list' object has no attribute 'keys'", "R3"),
    ],
)
def test_vanilla_vllm_fails_on_transformers5_tokenizer(served_models, server, variant, line, code):
    model = served_models(variant)
    port = free_port()
    srv = server(serve_argv_vanilla(model, port), engine_env(), "vanilla")
    assert srv.wait_ready() is False
    assert srv.wait_exit() != 0
    assert line in srv.log()
    assert triaged(srv.log_path) == code


# R5 too: transformers 5 keeps rope_theta only inside rope_parameters.
@pytest.mark.parametrize("variant, codes", [("v5-generic", ["R3", "R3b", "R5"]), ("v5-qwen2", ["R3", "R5"])])
def test_launcher_serves_transformers5_model_with_authors_ids(served_models, tmp_path, variant, codes, launched):
    model = served_models(variant)
    author = json.loads(Path(str(model) + ".author.json").read_text())
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work")
    assert [r["code"] for r in report["repairs"]] == codes and all(r["verified"] for r in report["repairs"])
    assert f"'tokenizer': '{report['args'][1]}'" in srv.log()  # vLLM really got the overlay
    chat_and_complete(srv, model)
    for token, want in author["special_ids"].items():
        assert srv.token_ids(str(model), token) == [want], token
    assert srv.token_ids(str(model), author["probe"]) == author["probe_ids"]


def test_clean_model_gets_zero_args_and_serves(served_models, tmp_path, launched):
    model = served_models("457-generic")
    # The launcher's real exec of `vllm` (the other starts run it in a fork of the engine host).
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", exec_=True)
    assert report["args"] == [] and report["env"] == {} and report["repairs"] == []
    assert f"[compat] exec vllm serve {model} --max-model-len 256 --port {srv.port} --host 127.0.0.1" in srv.log()
    chat_and_complete(srv, model)


# ---- R2, R4, R5: each proven on the real engine ---------------------------------------------

GREEDY = ["--dtype", "float32"]  # the reference tokens come from transformers' own generate in float32


@pytest.fixture(scope="module")
def proof_models(tmp_path_factory):
    """Tiny models with a greedy reference from their author's transformers (see build_model.py)."""
    base = tmp_path_factory.mktemp("proof")
    return {
        # Saved by transformers 5 with rope_theta 1e6: only inside rope_parameters.
        "rope": build("v5", "generic", base / "rope", "--initializer-range", "0.1", "--reference-tokens", "16"),
        # A clean 4.57 Llama exported under a class name neither vLLM nor transformers knows.
        "arch": build(
            "457",
            "generic",
            base / "arch",
            "--initializer-range",
            "0.1",
            "--reference-tokens",
            "16",
            "--architecture",
            "TinyChatForCausalLM",
        ),
    }


def test_r2_chat_without_template_400_vanilla_200_through_launcher(served_models, server, tmp_path, launched):
    model = served_models("457-generic-notemplate")
    port = free_port()
    vanilla = server(serve_argv_vanilla(model, port), engine_env(), "vanilla")
    assert vanilla.wait_ready(), vanilla.log()[-3000:]
    status, body = vanilla.chat(str(model))
    assert status == 400 and "chat template" in json.dumps(body)
    report = tmp_path / "error_report_raw.json"  # what the platform keeps of a failed chat probe
    report.write_text(json.dumps({"request": "/v1/chat/completions", "status": status, "response": body}))
    assert triaged(report) == "R2"
    vanilla.stop()
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work")
    assert [r["code"] for r in report["repairs"]] == ["R2"] and report["args"][0] == "--chat-template"
    status, body = srv.chat(str(model))
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"


def test_r5_restores_rope_theta_greedy_tokens_match_transformers5(proof_models, served_models, server, tmp_path, launched):
    model = proof_models["rope"]
    author = author_record(model)
    n = len(author["reference_tokens"])
    # Vanilla, with a tokenizer 4.57 can load (same vocabulary): only the config differs.
    port = free_port()
    argv = serve_argv_vanilla(model, port) + ["--tokenizer", str(served_models("457-generic"))] + GREEDY
    vanilla = server(argv, engine_env(), "vanilla")
    assert vanilla.wait_ready(), vanilla.log()[-3000:]
    assert vanilla.greedy_tokens(str(model), author["reference_prompt"], n) != author["reference_tokens"]
    vanilla.stop()
    assert triaged(vanilla.log_path) == "unknown"  # wrong tokens, and nothing in the log says so
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY)
    [r5] = [r for r in report["repairs"] if r["code"] == "R5"]
    assert r5["hf_overrides"] == {"rope_theta": 1000000.0}
    assert srv.greedy_tokens(str(model), author["reference_prompt"], n) == author["reference_tokens"]


def test_r4_canonical_class_greedy_tokens_match_transformers(proof_models, server, tmp_path, launched):
    model = proof_models["arch"]
    author = author_record(model)
    port = free_port()
    vanilla = server(serve_argv_vanilla(model, port) + GREEDY, engine_env(), "vanilla")
    assert vanilla.wait_ready() is False and vanilla.wait_exit() != 0
    assert "Model architectures ['TinyChatForCausalLM'] are not supported for now." in vanilla.log()
    assert triaged(vanilla.log_path) == "R4"
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY)
    assert [r["code"] for r in report["repairs"]] == ["R4"]
    assert json.loads(report["args"][report["args"].index("--hf-overrides") + 1]) == {"architectures": ["LlamaForCausalLM"]}
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]


def test_kv_cache_larger_than_memory_is_triaged_as_kv(served_models, server):
    """The engine itself says the KV cache does not fit (no repair fixes that): rule KV's
    refusal, whose fix names the --max-model-len to lower (doctor predicts it: tests/e2e/test_kv_vs_engine.py)."""
    model = served_models("457-generic")
    port = free_port()
    argv = serve_argv_vanilla(model, port)
    argv[argv.index("--max-model-len") + 1] = "2000000"
    srv = server(argv, engine_env({"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}), "vanilla")
    assert srv.wait_ready() is False and srv.wait_exit() != 0
    assert "larger than the available KV cache memory" in srv.log()
    verdict = triage_file(str(srv.log_path))
    assert verdict.code == "KV" and "max-model-len" in verdict.fix


def test_r3c_tokenizer_json_alone_vanilla_invents_a_bos_launcher_keeps_the_authors_ids(served_models, server, tmp_path, launched):
    """An export with tokenizer.json and no tokenizer_config.json: 4.57 loads it as
    LlamaTokenizerFast, which invents `<s>` past the vocabulary and prepends it; vLLM serves that
    id (a padding row of its embedding) and answers 200. Nothing in the log says so."""
    from tokenizers import Tokenizer

    model = tmp_path / "tokenizer-json-only"
    shutil.copytree(served_models("457-generic"), model)
    (model / "tokenizer_config.json").unlink()
    (model / "special_tokens_map.json").unlink()
    truth = Tokenizer.from_file(str(model / "tokenizer.json")).encode("hello world").ids  # the author's own processing
    vocab_size = json.loads((model / "config.json").read_text())["vocab_size"]
    vanilla = server(serve_argv_vanilla(model, free_port()), engine_env(), "vanilla")
    assert vanilla.wait_ready(), vanilla.log()[-3000:]
    status, answer = vanilla.post("/tokenize", {"model": str(model), "prompt": "hello world"})
    assert status == 200 and answer["tokens"][1:] == truth and answer["tokens"][0] >= vocab_size
    vanilla.stop()
    assert triaged(vanilla.log_path) == "unknown"
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work")
    assert [r["code"] for r in report["repairs"]] == ["R3c"] and report["repairs"][0]["verified"] is True
    status, answer = srv.post("/tokenize", {"model": str(model), "prompt": "hello world"})
    assert status == 200 and answer["tokens"] == truth
    chat_and_complete(srv, model)
