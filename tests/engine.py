"""Real vLLM 0.11.0 on the CPU (.venv-engine): start `vllm serve`, wait, talk HTTP, stop."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
ENGINE_BIN = ROOT / ".venv-engine" / "bin"
START_TIMEOUT_S = 240


def engine_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PATH": f"{ENGINE_BIN}{os.pathsep}{env.get('PATH', '')}",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    for key in ("COMPAT_ENGINE_PYTHON", "PYTHONPATH", "VIRTUAL_ENV"):
        env.pop(key, None)
    env.update(extra or {})
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `vllm serve`, started by argv, with its whole log kept for assertions."""

    def __init__(self, argv: List[str], env: Dict[str, str], log: Path, port: int) -> None:
        self.port = port
        self.log_path = log
        self._log = open(log, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     cwd=str(ROOT), start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> bool:
        """True once /health answers 200; False when the process exited first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise TimeoutError(f"vLLM did not become ready in {timeout}s; log tail:\n{self.log()[-3000:]}")

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        return self.proc.wait(timeout=timeout)

    def post(self, path: str, body: dict) -> Tuple[int, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def serve_argv_vanilla(model: Path, port: int) -> List[str]:
    return [str(ENGINE_BIN / "vllm"), "serve", str(model), "--max-model-len", "256", "--port", str(port),
            "--host", "127.0.0.1"]


def launcher_argv(port: int) -> List[str]:
    """What the image's entrypoint does: the engine's Python runs `common launch`."""
    return [str(ENGINE_BIN / "python"), "-m", "common", "launch", "--",
            "--max-model-len", "256", "--port", str(port), "--host", "127.0.0.1"]


__all__ = ["Server", "engine_env", "free_port", "launcher_argv", "serve_argv_vanilla", "sys"]
