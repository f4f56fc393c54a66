"""scripts/with-docker.sh on real daemons: a DOCKER_HOST that does not answer gives way to the
default socket's daemon and is not passed on; a daemon that accepts and never answers does not
hang the run; a run it started a daemon for is the command itself (a kill reaches it), and once it
has ended, killed even with SIGKILL, the daemon is stopped and no lock is held.

The default socket is a Docker context (DOCKER_CONFIG in a temp dir) naming the session's own
daemon; the daemons started here have their data in a temp dir of their own (a short path: the
containerd socket under it must fit a unix socket's 108 bytes).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.images.conftest import ROOT

SCRIPT = str(ROOT / "scripts" / "with-docker.sh")


@pytest.fixture
def docker_config(docker_client, tmp_path):
    """DOCKER_CONFIG whose current context is the session's daemon: the client's default."""
    config = tmp_path / "docker-config"
    config.mkdir()
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    env = dict(os.environ, DOCKER_CONFIG=str(config))
    env.pop("DOCKER_HOST", None)
    subprocess.run(["docker", "context", "create", "live", "--docker", f"host={host}"], env=env, check=True, capture_output=True)
    subprocess.run(["docker", "context", "use", "live"], env=env, check=True, capture_output=True)
    return str(config)


def run(env: dict, *command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SCRIPT, *command], env=env, capture_output=True, text=True, timeout=timeout)


SHOW = "echo DOCKER_HOST=${DOCKER_HOST-unset}; docker version -f '{{.Server.Version}}'"


def test_a_dead_docker_host_gives_way_to_the_default_socket_and_is_not_passed_on(docker_config, tmp_path):
    dead = f"unix://{tmp_path}/nothing-here.sock"
    env = dict(os.environ, DOCKER_HOST=dead, DOCKER_CONFIG=docker_config, COMPAT_DOCKER_CACHE=str(tmp_path / "unused"))
    result = run(env, "sh", "-c", SHOW)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "DOCKER_HOST=unset" and lines[1], result.stdout
    assert f"DOCKER_HOST={dead} does not answer" in result.stderr
    assert not (tmp_path / "unused").exists()  # no daemon of its own was started


def test_a_daemon_that_never_answers_does_not_hang_the_run(docker_config, tmp_path):
    """A socket that accepts and then says nothing, as a wedged daemon: `docker version` is cut
    off after COMPAT_DOCKER_ANSWER_TIMEOUT seconds and the live default is used."""
    path = str(tmp_path / "wedged.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(8)
    held = []
    threading.Thread(target=lambda: [held.append(server.accept()) for _ in range(8)], daemon=True).start()
    env = dict(os.environ, DOCKER_HOST=f"unix://{path}", DOCKER_CONFIG=docker_config, COMPAT_DOCKER_ANSWER_TIMEOUT="2")
    start = time.monotonic()
    try:
        result = run(env, "sh", "-c", SHOW, timeout=60)
    finally:
        server.close()
    assert result.returncode == 0 and result.stdout.startswith("DOCKER_HOST=unset\n"), result.stdout + result.stderr
    assert time.monotonic() - start < 30 and held  # it did talk to the wedged one first


def _own_daemon_env(tmp_path) -> tuple:
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("starting a daemon of its own needs root and dockerd (Debian's docker.io)")
    cache = Path(tempfile.mkdtemp(prefix="wd-", dir="/tmp"))
    config = tmp_path / "empty-docker-config"  # no context: the default socket, where nothing answers here
    config.mkdir()
    if os.path.exists("/var/run/docker.sock"):
        pytest.skip("a daemon may answer at the default socket: the wrapper would use it")
    env = dict(os.environ, COMPAT_DOCKER_CACHE=str(cache), DOCKER_CONFIG=str(config))
    env.pop("DOCKER_HOST", None)
    return env, cache


def _start(env: dict, cache: Path) -> tuple:
    """The wrapper running `sleep` against a daemon it starts; (process, the daemon's pid)."""
    ready = cache / "ready"
    proc = subprocess.Popen(
        [SCRIPT, "sh", "-c", f"docker version >/dev/null && touch {ready} && exec sleep 600"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 180
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ready.exists(), f"the wrapper did not start a daemon: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}"
    pid = int((cache / "run" / "dockerd.pid").read_text())
    return proc, pid


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _free(path: Path) -> bool:
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False


def _stopped(pid: int, cache: Path, timeout: float = 90) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid) and _free(cache / "run" / "lock") and _free(cache / "run" / "start.lock"):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_run_takes_its_command_and_daemon_with_it(tmp_path, how):
    env, cache = _own_daemon_env(tmp_path)
    try:
        proc, daemon = _start(env, cache)
        # The daemon keeps none of the run's lock descriptors (a killed starter leaves none held).
        locks = {str(cache / "run" / "lock"), str(cache / "run" / "start.lock")}
        held = {os.readlink(f"/proc/{daemon}/fd/{fd}") for fd in os.listdir(f"/proc/{daemon}/fd")}
        assert not held & locks, held & locks
        proc.send_signal(how)
        proc.wait(timeout=20)  # the wrapper is the command: the signal ended it
        assert _stopped(daemon, cache), "the daemon or a lock outlived the run"
    finally:
        if "daemon" in locals() and _alive(daemon):
            os.kill(daemon, signal.SIGKILL)
        shutil.rmtree(cache, ignore_errors=True)
