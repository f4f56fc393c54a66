"""End to end on real vLLM 0.11.0 (CPU): a transformers-5 model kills vanilla vLLM and serves
through the launcher with the author's token ids; a clean model gets nothing and serves."""

import json
from pathlib import Path

import pytest

from tests.engine import ENGINE_BIN, Server, engine_env, free_port, launcher_argv, serve_argv_vanilla

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not (ENGINE_BIN / "vllm").exists(), reason="no .venv-engine: run `make engine-env`"),
]


@pytest.fixture
def server(tmp_path):
    started = []

    def start(argv, env, name="vllm"):
        port = int(argv[argv.index("--port") + 1])
        s = Server(argv, env, tmp_path / f"{name}.log", port)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()


def chat_and_complete(srv: Server, model: Path) -> None:
    status, body = srv.post("/v1/chat/completions", {
        "model": str(model), "max_tokens": 4, "temperature": 0,
        "messages": [{"role": "user", "content": "hello"}]})
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    status, body = srv.post("/v1/completions", {"model": str(model), "prompt": "hello world", "max_tokens": 4,
                                                "temperature": 0})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == 4


def served_ids(srv: Server, model: Path, text: str):
    status, body = srv.post("/tokenize", {"model": str(model), "prompt": text, "add_special_tokens": False})
    assert status == 200, body
    return body["tokens"]


def test_vanilla_vllm_fails_on_transformers5_tokenizer(models, server):
    model = models("v5-generic")
    port = free_port()
    srv = server(serve_argv_vanilla(model, port), engine_env(), "vanilla")
    assert srv.wait_ready() is False
    assert srv.wait_exit() != 0
    assert "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported." in srv.log()


def serve_through_launcher(server, model: Path, work: Path):
    """Start the image's launcher on `model` and wait; returns (server, port, report.json)."""
    port = free_port()
    env = engine_env({"MODEL_DIR": str(model), "COMPAT_CARD": "nv-a100", "COMPAT_WORK_DIR": str(work)})
    srv = server(launcher_argv(port), env, "launcher")
    assert srv.wait_ready(), srv.log()[-3000:]
    [report_path] = work.glob("run-*/report.json")
    return srv, port, json.loads(report_path.read_text())


@pytest.mark.parametrize("variant, codes", [("v5-generic", ["R3", "R3b"]), ("v5-qwen2", ["R3"])])
def test_launcher_serves_transformers5_model_with_authors_ids(models, server, tmp_path, variant, codes):
    model = models(variant)
    author = json.loads(Path(str(model) + ".author.json").read_text())
    srv, _, report = serve_through_launcher(server, model, tmp_path / "work")
    assert [r["code"] for r in report["repairs"]] == codes and all(r["verified"] for r in report["repairs"])
    assert f"'tokenizer': '{report['args'][1]}'" in srv.log()  # vLLM really got the overlay
    chat_and_complete(srv, model)
    for token, want in author["special_ids"].items():
        assert served_ids(srv, model, token) == [want], token
    assert served_ids(srv, model, author["probe"]) == author["probe_ids"]


def test_clean_model_gets_zero_args_and_serves(models, server, tmp_path):
    model = models("457-generic")
    srv, port, report = serve_through_launcher(server, model, tmp_path / "work")
    assert report["args"] == [] and report["env"] == {} and report["repairs"] == []
    assert f"[compat] exec vllm serve {model} --max-model-len 256 --port {port} --host 127.0.0.1" in srv.log()
    chat_and_complete(srv, model)
