"""Ask the engine's own Python what its transformers makes of a repair, with a time limit.

`run_checks` sends every request of a start to one child process (engine_checks/process.py,
whose docstring lists the request kinds and answer fields). The child never imports torch:
reading a tokenizer or a config does not need it, and importing it cost a repaired start ~3 s
and ~700 MB. A clean model never gets here. The one exception is doctor's (never launch's)
model build (common/doctor/model_build_finding.py): a batch of `model_build` requests runs the engine's own
vLLM and torch, in a process of its own that keeps torch on.
"""

from __future__ import annotations


import json
import os
import sys

from ..engine_checks import process as engine_process

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence

# The script the engine's Python runs (imported here for its file: importing it runs nothing).
SCRIPT = engine_process.__file__
DEFAULT_TIMEOUT_S = 60.0
# transformers 4.x reads these when imported and then loads tokenizers and configs without
# torch, TensorFlow or Flax. The child's alone: the engine vLLM starts keeps its torch.
TORCH_OFF = {"USE_TORCH": "0", "USE_TF": "0", "USE_FLAX": "0"}
# Request kinds that run the engine's own code (vLLM, torch): their process keeps torch on, and
# vLLM 0.6+ logs to stderr there (stdout carries the answers).
ENGINE_KINDS = ("model_build",)
ENGINE_ENV = {"VLLM_LOGGING_STREAM": "ext://sys.stderr", "VLLM_LOGGING_LEVEL": "WARNING"}


class Verdict:
    __slots__ = ("ok", "reason", "result")

    def __init__(self, ok: Optional[bool], reason: str, result: Optional[Dict[str, Any]] = None) -> None:
        self.ok = ok  # None: could not be checked here (no engine transformers, no Python)
        self.reason = reason
        self.result = result if result is not None else {}  # the check's whole answer

    def __repr__(self) -> str:
        return f"Verdict(ok={self.ok!r}, reason={self.reason!r})"


def engine_python(env: Mapping[str, str]) -> str:
    """The interpreter whose transformers the engine uses: in an image, the one running us."""
    return env.get("COMPAT_ENGINE_PYTHON") or sys.executable


def verify_timeout(env: Mapping[str, str]) -> float:
    """COMPAT_VERIFY_TIMEOUT for the whole child process; a bad value means the default."""
    from .settings import seconds

    return seconds(env, "COMPAT_VERIFY_TIMEOUT", DEFAULT_TIMEOUT_S)


def child_env(engine: bool = False) -> Dict[str, str]:
    """The checks' environment; `engine`: the requests run the engine's own code (ENGINE_KINDS)."""
    env = dict(os.environ)
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["HF_HUB_OFFLINE"] = "1"  # a check must never reach for a hub
    env["PYTHONIOENCODING"] = "utf-8"  # answers carry token text; an image's locale may be C
    if engine:
        for key, value in ENGINE_ENV.items():
            env.setdefault(key, value)
    else:
        env.update(TORCH_OFF)
    return env


def runs_engine(requests: Sequence[Mapping[str, Any]]) -> bool:
    return any(isinstance(r, dict) and r.get("kind") in ENGINE_KINDS for r in requests)


class _Run:
    __slots__ = ("stdout", "stderr", "returncode", "failure")

    def __init__(self, stdout: str = "", stderr: str = "", returncode: Optional[int] = None, failure: Optional[Verdict] = None) -> None:
        self.stdout, self.stderr, self.returncode = stdout, stderr, returncode
        self.failure = failure  # set when no answer can be trusted beyond what stdout holds

    def answers(self) -> List[Dict[str, Any]]:
        out = []
        for line in self.stdout.splitlines():
            if line.startswith("{"):
                try:
                    value = json.loads(line)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    out.append(value)
        return out

    def missing(self) -> Verdict:
        """The verdict of a request the child never answered."""
        if self.failure is not None:
            return self.failure
        tail = (self.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(False, f"verification exited {self.returncode}: {tail[:300]}")


def _start(argv: List[str], env: Mapping[str, str], engine: bool, stdin: bool) -> Any:
    """The checks' process, or a _Run that says why it could not start."""
    import subprocess  # only when a repair needs checking: the clean path never pays for it

    try:
        return subprocess.Popen(
            [engine_python(env)] + argv,
            env=child_env(engine),
            text=True,
            encoding="utf-8",
            errors="replace",
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        return _Run(failure=Verdict(None, f"verification could not start {engine_python(env)} ({exc.strerror})"))


def _finish(proc: Any, stdin_text: Optional[str], timeout: float) -> _Run:
    """Hand `proc` its requests and read every answer within `timeout` seconds."""
    import subprocess

    if isinstance(proc, _Run):
        return proc
    try:
        out, err = proc.communicate(stdin_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()  # what was answered before the limit still counts
        return _Run(out, err, proc.returncode, Verdict(False, f"verification timed out after {timeout:g}s"))
    except BaseException:  # the preflight's deadline or Ctrl-C: the check must not outlive it
        proc.kill()
        proc.wait()
        raise
    return _Run(out, err, proc.returncode)


def _run(argv: List[str], stdin_text: Optional[str], env: Mapping[str, str], timeout: Optional[float] = None, engine: bool = False) -> _Run:
    timeout = verify_timeout(env) if timeout is None else timeout
    return _finish(_start(argv, env, engine, stdin_text is not None), stdin_text, timeout)


class Warm:
    """An engine-checks process started before its requests exist (engine_checks/process.py --warm): it
    imports vLLM and torch while the caller still plans, and answers the engine requests handed
    to it later (run_checks_of_many's `warm`). doctor over a folder starts one for its model
    build, whose time is mostly that import. `close` ends one never handed its requests."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc: Any = _start([SCRIPT, "--warm"], env, engine=True, stdin=True)

    def take(self) -> Any:
        proc, self.proc = self.proc, None
        return proc

    def close(self) -> None:
        _kill(self.take())


def _kill(proc: Any) -> None:
    if proc is not None and not isinstance(proc, _Run):
        proc.kill()
        proc.communicate()


def _verdict(answer: Dict[str, Any]) -> Verdict:
    ok = answer.get("ok")
    if ok is not None and not isinstance(ok, bool):
        ok = False
    return Verdict(ok, str(answer.get("reason", "")), answer)


def run_checks(requests: Sequence[Mapping[str, Any]], env: Mapping[str, str]) -> List[Verdict]:
    """One verdict per request, in order, all answered by one engine-Python process.

    ok None: no engine Python or no transformers there (the caller reports "unverified");
    False: the check failed, the child died first, or the time limit ran out first."""
    if not requests:
        return []
    run = _run([SCRIPT], json.dumps(list(requests), ensure_ascii=False), env, engine=runs_engine(requests))
    by_index = {a["index"]: a for a in run.answers() if isinstance(a.get("index"), int)}
    return [_verdict(by_index[i]) if i in by_index else run.missing() for i in range(len(requests))]


def run_checks_of_many(
    requests: Sequence[Mapping[str, Any]], env: Mapping[str, str], timeout: float, warm: Optional[Warm] = None
) -> List[Verdict]:
    """run_checks for the checks of many models (doctor over a folder): one process answers them
    all within `timeout` seconds (`warm`'s, already started, when given). When it dies before
    answering every request, the one it was on gets the failure and the rest go to a fresh
    process: one model's crash never decides another model's verdict. When the time runs out,
    the rest are not checked (ok None: unverified)."""
    verdicts: List[Verdict] = []
    todo = list(requests)
    started = warm.take() if warm is not None else None
    if not todo:
        _kill(started)
    while todo:
        stdin_text = json.dumps(todo, ensure_ascii=False)
        if started is not None:
            run, started = _finish(started, stdin_text, timeout), None
        else:
            run = _run([SCRIPT], stdin_text, env, timeout, runs_engine(todo))
        by_index = {a["index"]: a for a in run.answers() if isinstance(a.get("index"), int)}
        done = 0
        while done in by_index:
            verdicts.append(_verdict(by_index[done]))
            done += 1
        if done == len(todo):
            break
        failure = run.missing()
        if failure.ok is None:  # the Python could not start: nothing can be checked with it
            verdicts += [failure] * (len(todo) - done)
            break
        verdicts.append(failure)
        todo = todo[done + 1 :]
        if "timed out" in failure.reason:
            verdicts += [Verdict(None, f"not checked: {failure.reason} on an earlier model")] * len(todo)
            break
    return verdicts
