"""The tests' side of harness/engine_host.py: one pre-imported host per engine venv, started on first
use and stopped with the test process, and the forked starts it makes.

COMPAT_TEST_FORK=0 turns the hosts off: every start is then a process of its own, as before them.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from harness.engine_env import COMMON_ENV
from harness.starts import record

ROOT = Path(__file__).resolve().parents[1]
HOST_START_TIMEOUT_S = 180


class ForkedProcess:
    """A start made by a host, with as much of subprocess.Popen as the tests use."""

    def __init__(self, host: EngineHost, pid: int, argv: List[str]) -> None:
        self.host, self.pid, self.args = host, pid, argv
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.host.request({"poll": self.pid})["returncode"]
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            time.sleep(0.2)
        assert self.returncode is not None
        return self.returncode


class EngineHost:
    """One running harness/engine_host.py in an engine venv's Python."""

    def __init__(self, python: Path, bin_dir: Path) -> None:
        self.python, self.bin = python, bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="engine-host-"))
        self.socket = str(self.dir / "host.sock")
        self.log_path = self.dir / "host.log"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "COMPAT_ENGINE_PYTHON")}
        env.update(COMMON_ENV)
        env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
        record("host")
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [str(python), "-m", "harness.engine_host", self.socket], cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + HOST_START_TIMEOUT_S
        while "engine host: ready" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the engine host of {python} did not come up:\n{self.log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)

    def request(self, message: Dict[str, Any]) -> Dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(60)
            conn.connect(self.socket)
            conn.sendall(json.dumps(message).encode() + b"\n")
            data = b""
            while not data.endswith(b"\n"):
                chunk = conn.recv(1 << 16)
                if not chunk:
                    raise RuntimeError(f"the engine host ended; its log:\n{self.log_path.read_text(errors='replace')[-3000:]}")
                data += chunk
        return json.loads(data)

    def start(self, argv: List[str], env: Dict[str, str], log: Path, cwd: Path) -> ForkedProcess:
        answer = self.request({"start": {"argv": argv, "env": env, "cwd": str(cwd), "log": str(log)}})
        return ForkedProcess(self, int(answer["pid"]), argv)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_HOSTS: Dict[Path, EngineHost] = {}


def forkable(argv: List[str]) -> Optional[Path]:
    """The engine venv's bin directory when `argv` is a start a host can fork: the engine's
    `vllm serve`, or its Python running the image's launcher."""
    if os.environ.get("COMPAT_TEST_FORK") == "0" or len(argv) < 2:
        return None
    program = Path(argv[0])
    if program.name == "vllm" and argv[1] == "serve":
        return program.parent
    if program.name == "python" and argv[1:4] == ["-m", "common", "launch"]:
        return program.parent
    return None


def host_for(bin_dir: Path) -> EngineHost:
    if bin_dir not in _HOSTS:
        _HOSTS[bin_dir] = EngineHost(bin_dir / "python", bin_dir)
    return _HOSTS[bin_dir]


@atexit.register
def _close_all() -> None:
    for host in _HOSTS.values():
        host.close()
    _HOSTS.clear()
