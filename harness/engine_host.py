"""One pre-imported engine per engine venv, whose every start is a fork of it.

    ENGINE_PYTHON -m harness.engine_host SOCKET

A start of vLLM costs an interpreter, torch's and vLLM's import (10-15 s on two cores) before its
own work. This host pays the import once (what harness/engine_worker.py preloads) and forks
a child per start that then runs exactly what the test asked for, with its argv, environment,
working directory and log:
  ENGINE/bin/vllm serve ...                  the engine's own CLI, in the child
  ENGINE/bin/python -m common launch -- ...  the image's launcher, whose final exec of `vllm`
                                             becomes that CLI in the same child, with the
                                             environment, PYTHONPATH and sitecustomize the exec'd
                                             interpreter would have had
A V1 engine's core process (0.11, 0.32) and its multiprocessing executor's workers (0.11's when
sharded, 0.32's always) are forked from the child too, where the CPU platform would spawn them and
import everything again (the cards' accelerator platforms fork them as well), and so is the
process vLLM 0.5.5's OpenAI server keeps its engine in (spawned there on every platform: the
engine's code and its work are the same, the import is not paid again).
Only the exec and these forks differ from the image's; harness/engine.py's Server keeps the real
exec (and so the spawned processes) for the tests that prove it (`exec_=True`), and so does a start whose plan patched
the engine's source on disk (H1): the modules this host imported are not the patched ones, so the child then
execs for real. Each child leads its own session (a kill of its group stops the engine's
processes with it) and writes only to its log.

Requests, one JSON line per connection, answered with one:
  {"start": {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}}  ->  {"pid": N}
  {"poll": N}                                                        ->  {"returncode": int | null}
The host is single-threaded (a fork of a threaded process can hang in the child): it reaps its
children between requests, and ends with the process that started it, taking its children along.

Python 3.10: vLLM 0.5.5 runs on it.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import signal
import socket
import sys
import traceback
from typing import Any, Dict, List, NoReturn, Optional

from harness.engine_worker import CLIS, preload

# Exit status of a child whose request could not even be set up.
SETUP_FAILED = 121


class Host:
    def __init__(self, path: str) -> None:
        self.children: Dict[int, Optional[int]] = {}  # pid -> return code, None while it runs
        self.parent = os.getppid()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.listener.settimeout(1.0)
        self.mtimes = module_mtimes()

    def serve(self) -> None:
        print("engine host: ready", flush=True)
        while os.getppid() == self.parent:
            self._reap()
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(30)
                request = json.loads(_read_line(conn))
                self._reap()
                if "start" in request:
                    answer: Dict[str, Any] = {"pid": self._start(request["start"], conn)}
                else:
                    answer = {"returncode": self.children.get(int(request["poll"]))}
                conn.sendall(json.dumps(answer).encode() + b"\n")
        for pid, code in self.children.items():  # the tests' process is gone: so are its engines
            if code is None:
                _kill_group(pid)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children[pid] = os.waitstatus_to_exitcode(status)

    def _start(self, spec: Dict[str, Any], conn: socket.socket) -> int:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            self.children[pid] = None
            return pid
        code = SETUP_FAILED
        try:
            conn.close()
            self.listener.close()
            code = _child(spec, self.mtimes)
        except SystemExit as exc:  # sys.exit(main()), as the `vllm` script ends
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
        except BaseException:  # noqa: B902 - the child's error is its log's, never the host's
            traceback.print_exc()
            code = 1
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)


def _child(spec: Dict[str, Any], mtimes: Dict[str, float]) -> int:
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(spec["cwd"])
    env: Dict[str, str] = dict(spec["env"])
    argv: List[str] = list(spec["argv"])
    _as_if_started(argv, env)
    if os.path.basename(argv[0]) == "vllm":
        _vllm(argv[1:])
    if argv[1:4] == ["-m", "common", "launch"]:
        return _launch(argv[4:], env, mtimes)
    os.execvpe(argv[0], argv, env)  # anything else runs as it would have
    return SETUP_FAILED


def _as_if_started(argv: List[str], env: Dict[str, str]) -> None:
    """Make this child what a Python started as `argv` with `env` would be: its environment, its
    PYTHONPATH first on sys.path and that path's sitecustomize run. Where the path holds another
    copy of a module this host imported (a vLLM copy on PYTHONPATH, as R7's test puts one), the
    fork cannot be that Python: it execs `argv` for real."""
    os.environ.clear()
    os.environ.update(env)
    entries = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e]
    if _shadows(entries):
        os.execvpe(argv[0], argv, env)
    for entry in reversed(entries):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    _sitecustomize(entries)


def _shadows(entries: List[str]) -> bool:
    """Whether a directory of `entries` holds a top-level module or package this process already
    imported from elsewhere (sitecustomize aside: it is run, not imported)."""
    for entry in entries:
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            top = name[:-3] if name.endswith(".py") else name
            module = sys.modules.get(top)
            if top == "sitecustomize" or module is None:
                continue
            where = getattr(module, "__file__", None) or ""
            if not os.path.abspath(where).startswith(os.path.abspath(entry) + os.sep):
                return True
    return False


def _launch(args: List[str], env: Dict[str, str], mtimes: Dict[str, float]) -> int:
    """`python -m common launch -- ARGS` as the image's entrypoint runs it (common/cli.py), with
    the environment it was started with, its exec of vLLM run here."""
    import common.start.launch as launch

    real_exec = os.execvpe

    def exec_here(file: str, argv: List[str], exec_env: Dict[str, str]) -> None:
        if file != "vllm" or changed_on_disk(mtimes):
            real_exec(file, argv, exec_env)  # a patched engine (or another program): the real exec
        os.execvpe = real_exec  # type: ignore[assignment] - a real exec from here on is one
        _as_if_started(argv, exec_env)
        _vllm(argv[1:])

    os.execvpe = exec_here  # type: ignore[assignment]
    vllm_args = args[1:] if args[:1] == ["--"] else args
    launch.launch(vllm_args, env)  # never returns: it "execs"
    return SETUP_FAILED


def _vllm(args: List[str]) -> NoReturn:
    """The engine's own `vllm` CLI with `args`, in this process, ending as its script ends."""
    for main_module, _, _ in CLIS:
        try:
            main = importlib.import_module(main_module).main
            break
        except (ImportError, AttributeError):
            continue
    else:
        raise RuntimeError("this vLLM has no CLI the engine host knows")
    _spawned_processes_forked()
    sys.argv = ["vllm", *args]
    raise SystemExit(main())


def _spawned_processes_forked() -> None:
    """V1 engines start their engine core as a process of its own, and their multiprocessing
    executor's workers as others (0.11's at tensor-parallel sizes above 1, 0.32's at every size),
    all spawned on the CPU platform (which sets VLLM_WORKER_MULTIPROC_METHOD=spawn) and forked on
    an accelerator; vLLM 0.5.5's OpenAI server spawns the process that holds its engine (the RPC
    server of its multiprocessing frontend) on every platform. A spawn imports torch and vLLM
    again (6-10 s here, per process), what this host exists to pay once: here they are forked."""
    import multiprocessing

    for name in ("vllm.v1.engine.utils", "vllm.v1.executor.multiproc_executor"):
        module = _module(name)  # vLLM 0.5.5: neither process
        if module is not None and hasattr(module, "get_mp_context"):
            module.get_mp_context = lambda: multiprocessing.get_context("fork")
    api_server = _module("vllm.entrypoints.openai.api_server")
    if api_server is not None and hasattr(api_server, "run_rpc_server"):  # 0.5.x's frontend
        api_server.multiprocessing = _ForkingFrontend()


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


class _ForkingFrontend:
    """`multiprocessing` as vLLM 0.5.5's api_server module sees it: its get_context("spawn")
    (the one call it makes) gives processes forked from the server, which start by forgetting
    the server's running event loop (the RPC server runs a loop of its own: uvloop.run refuses to
    start one where another is running, and a forked thread still names the parent's)."""

    @staticmethod
    def get_context(method: Optional[str] = None) -> Any:
        import asyncio
        import multiprocessing

        fork = multiprocessing.get_context("fork")

        class Process(fork.Process):  # type: ignore[name-defined,misc]
            def run(self) -> None:
                asyncio.events._set_running_loop(None)
                super().run()

        return type("ForkContext", (), {"Process": Process})


def _sitecustomize(entries: List[str]) -> None:
    """What the exec'd interpreter would have run at start: the first sitecustomize on PYTHONPATH."""
    for entry in entries:
        path = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("sitecustomize", path)
            if spec is not None and spec.loader is not None:
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            return


def module_mtimes() -> Dict[str, float]:
    """Each imported module's file with its modification time, to tell later whether one was rewritten."""
    out = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path:
            try:
                out[path] = os.stat(path).st_mtime
            except OSError:
                pass
    return out


def changed_on_disk(mtimes: Dict[str, float]) -> bool:
    """Whether a module this host imported was rewritten since (a start-time engine patch)."""
    for path, mtime in mtimes.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return True
        except OSError:
            return True
    return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        data += chunk
    return data


def main(argv: List[str]) -> int:
    preload()
    import common.start.launch  # noqa: F401 - the launcher's own imports, paid once too

    gc.freeze()  # with the rest of what preload() left out of the collector's view

    Host(argv[0]).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
