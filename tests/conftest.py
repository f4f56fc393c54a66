"""Fixtures of the integration tests."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from compat_build.platform_client import PlatformClient
from common.triage import triage_file
from harness.engine import Engine, Server, launch_report
from harness.ports import free_port

TOKEN = "s3cr3t-token-value"


@pytest.fixture
def platform():
    """A server answering from a script: each entry is (status, body) or 'hang' (sleeps past timeout)."""
    state = {"script": [], "requests": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            state["requests"].append(
                (self.command, self.path, self.headers.get("Authorization"), self.rfile.read(length) if length else b"")
            )
            step = state["script"].pop(0) if state["script"] else (200, {"code": 0, "data": True})
            if step == "hang":
                threading.Event().wait(1.0)
                step = (200, {"code": 0, "data": True})
            status, body = step
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state["client"] = PlatformClient(f"http://127.0.0.1:{server.server_address[1]}", token=TOKEN, timeout=0.3, retries=2, backoff=0.01)
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def server(tmp_path):
    """Start `vllm serve` (or the launcher that execs it) by argv; every start is stopped after
    the test, its whole log kept in tmp_path/<name>.log."""
    started = []

    def start(argv, env, name="vllm", exec_=False):
        srv = Server(argv, env, tmp_path / f"{name}.log", int(argv[argv.index("--port") + 1]), exec_=exec_)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def launched(server):
    """Start a card's image launcher (the engine's Python runs `common launch`, as the entrypoint
    does) on a model and wait until vLLM serves; returns (server, report.json). A healthy start is
    claimed by no triage rule. The launcher's exec of vLLM runs in the engine host's fork unless
    `exec_=True` (harness/engine.py's Server)."""

    def start(engine: Engine, card: str, model, work, *args: str, env=None, name: str = "launcher", exec_: bool = False):
        srv = server(engine.launcher_argv(free_port()) + list(args), engine.launcher_env(model, card, work, env), name, exec_)
        assert srv.wait_ready(), srv.log()[-3000:]
        assert triage_file(str(srv.log_path)).code == "unknown", srv.log()[-3000:]
        return srv, launch_report(work)

    return start
