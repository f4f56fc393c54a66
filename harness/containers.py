"""Containers of the built images, run the way the platform runs them, tracked so that none
outlives its test (jupyter/docker-stacks' TrackedContainer, on the docker SDK).

The platform's way (DESIGN.md, "What an image asks of the platform"): the model mounted read-only
at /model, any user id, a read-only root filesystem with a writable temp dir, host networking,
enough shared memory for vLLM's workers. `platform_run_kwargs` is that, and nothing more.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional

from docker.errors import APIError, NotFound

from compat_build import owner
from harness.cores import bind_string
from harness.starts import record
from harness.engine import START_TIMEOUT_S, Endpoint
from harness.engine_env import COMMON_ENV

# A uid and gid no image knows: the platform may run a container as any user.
PLATFORM_USER = "54321:54321"
# vLLM's CPU engine shares tensors between its processes through /dev/shm; Docker's default 64 MB
# is too little ("Insufficient space in /dev/shm"): the platform gives pods more, so do the tests.
SHM_SIZE = "1g"


# The platform's /tmp, as docs/images-and-releases.md asks for it: writable and executable (the engine
# loads the kernels it compiles into its caches there). The release gate runs the self-test on
# Docker's default tmpfs instead, without exec (compat_build.release.PLATFORM_TMPFS).
PLATFORM_TMPFS = {"/tmp": "rw,exec,size=2g"}
EXEC_TIMEOUT_S = 120.0


class ExecTimeout(AssertionError):
    """A command run inside a container did not end in time (the container is removed after the
    test, and what it ran with it)."""


def platform_run_kwargs(model: Path, env: Optional[Dict[str, str]] = None) -> dict:
    """docker SDK `containers.run` arguments of a platform start of `model`."""
    return dict(
        user=PLATFORM_USER,
        read_only=True,
        tmpfs=dict(PLATFORM_TMPFS),
        volumes={str(model): {"bind": "/model", "mode": "ro"}},
        network_mode="host",
        shm_size=SHM_SIZE,
        environment={**COMMON_ENV, **(env or {})},
    )


def own_cpuset() -> str:
    """The cores this test process may run on, as Docker's --cpuset-cpus: a container started
    here runs on the share of the machine its pytest worker has (harness/cores.py), as a process
    the worker starts would. Unconfined, the engines in the containers bind their threads from
    the lowest core up (vLLM 0.32 the first, 0.11 every one it sees), onto the other worker's
    core, while this worker's own core waits on them idle."""
    return bind_string(sorted(os.sched_getaffinity(0)))


class Container(Endpoint):
    """One detached container of an image; its logs are the container's stdout and stderr."""

    def __init__(self, client, image: str, command: List[str], port: int = 0, **kwargs) -> None:
        self.client = client
        self.port = port
        labels = {**owner.labels(), **(kwargs.pop("labels", None) or {})}
        kwargs.setdefault("cpuset_cpus", own_cpuset())
        record("container")
        self.container = client.containers.run(image, command, detach=True, labels=labels, **kwargs)

    def log(self) -> str:
        try:
            return self.container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        except (APIError, NotFound):
            return ""

    def running(self) -> bool:
        try:
            self.container.reload()
        except NotFound:
            return False
        return self.container.status in ("created", "running")

    def wait_exit(self, timeout: float = START_TIMEOUT_S) -> int:
        return int(self.container.wait(timeout=timeout)["StatusCode"])

    def exec(self, *argv: str, timeout: float = EXEC_TIMEOUT_S) -> tuple:
        """(exit code, output) of a command run inside the running container, within `timeout`
        seconds (the SDK's exec_run has no limit of its own: it waits in a thread here)."""
        done: Dict[str, object] = {}

        def run() -> None:
            try:
                done["result"] = self.container.exec_run(list(argv), user=PLATFORM_USER)
            except Exception as exc:  # noqa: B902 - handed to the caller's thread
                done["error"] = exc

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            raise ExecTimeout(f"{' '.join(argv)} inside {self.container.short_id} ran past {timeout:g}s")
        if "error" in done:
            raise done["error"]  # type: ignore[misc]
        result = done["result"]
        return result.exit_code, result.output.decode("utf-8", "replace")  # type: ignore[attr-defined]

    def remove(self) -> None:
        try:
            self.container.remove(force=True)
        except NotFound:
            pass


class TrackedContainers:
    """Starts containers for one test and removes them all afterwards, their logs kept in
    `log_dir/<name>.log` for the failure report."""

    def __init__(self, client, log_dir: Path) -> None:
        self.client = client
        self.log_dir = log_dir
        self.started: Dict[str, Container] = {}

    def run(self, name: str, image: str, command: List[str], port: int = 0, **kwargs) -> Container:
        container = Container(self.client, image, command, port, **kwargs)
        self.started[name] = container
        return container

    def run_to_end(self, name: str, image: str, command: List[str], timeout: float = 600, **kwargs) -> tuple:
        """(exit code, stdout, stderr) of a container run to its end, like `docker run --rm`."""
        container = self.run(name, image, command, **kwargs)
        status = container.wait_exit(timeout)
        out = container.container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        err = container.container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        return status, out, err

    def remove_all(self) -> None:
        for name, container in self.started.items():
            (self.log_dir / f"{name}.log").write_text(container.log())
            container.remove()


def wait_for(predicate, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
