"""Run the launcher in a child process with a fault injected, as this user or as `nobody`.

`Sandbox` is a world-readable directory holding a copy of a model, a fake `vllm` that records the
argv and environment it was exec'd with, and a work dir. `Sandbox.launch(...)` runs
`common.cli.main(["launch", "--", ARGS...])` in a fresh interpreter after patching one name
(`module:attr.path`) with a fault:

  raise    RuntimeError              enospc   OSError(ENOSPC)
  exit     SystemExit (a BaseException no `except Exception` sees)
  hang     sleeps (COMPAT_TIMEOUT must end it)
  swallow  hangs and swallows every Exception raised into it
  value:J  the attribute becomes the JSON value J (a constant, not a function)

The child's environment is exactly the one given (nothing is added to pass the fault: it goes in
argv), so what vLLM receives can be compared with it. As root, `as_nobody=True` drops to uid/gid
65534 (the tests run as root here, where chmod alone proves nothing).
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534

CHILD = r"""
import errno, functools, importlib, json, sys, time
sys.path.insert(0, sys.argv[1])
spec = json.loads(sys.argv[2])
args = sys.argv[3:]

def fault(kind):
    def injected(*a, **k):
        if kind == "raise":
            raise RuntimeError("injected fault")
        if kind == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        if kind == "exit":
            raise SystemExit(3)
        if kind == "hang":
            time.sleep(3600)
        if kind == "swallow":
            while True:
                try:
                    time.sleep(3600)
                except Exception:
                    pass
        raise AssertionError(kind)
    return injected

for target, kind in spec:
    module, _, path = target.partition(":")
    names = path.split(".")
    owner = functools.reduce(getattr, names[:-1], importlib.import_module(module))
    value = json.loads(kind[6:]) if kind.startswith("value:") else fault(kind)
    setattr(owner, names[-1], tuple(value) if isinstance(value, list) else value)

from common.cli import main
sys.exit(main(["launch", "--"] + args))
"""


def nobody_python() -> Optional[str]:
    """An interpreter (3.10+) that uid 65534 can run: the launcher is stdlib-only."""
    candidates = [
        sys.executable,
        os.path.realpath(sys.executable),
        shutil.which("python3"),
        "/usr/bin/python3",
        "/usr/local/bin/python3",
        shutil.which("python3.10"),
    ]
    for candidate in filter(None, candidates):
        try:
            proc = subprocess.run(
                [candidate, "-c", "import sys; assert sys.version_info >= (3, 10)"],
                user=NOBODY,
                group=NOBODY,
                extra_groups=[],
                capture_output=True,
                timeout=30,
                cwd="/",
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if proc.returncode == 0:
            return candidate
    return None


def nobody_skip_reason() -> Optional[str]:
    """Why the `nobody` variant cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root: every case above already ran without privileges"
    try:
        import pwd

        pwd.getpwuid(NOBODY)
    except (ImportError, KeyError):
        return "running as root and there is no uid 65534 to drop to"
    if nobody_python() is None:
        return "running as root and no Python 3.10+ that uid 65534 may run"
    return None


class Result:
    def __init__(self, proc: subprocess.CompletedProcess, called: Optional[dict], elapsed: float) -> None:
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr
        self.called, self.elapsed = called, elapsed

    @property
    def argv(self) -> List[str]:
        assert self.called is not None, f"vLLM was never started:\n{self.stderr}"
        return self.called["argv"]

    @property
    def env(self) -> Dict[str, str]:
        assert self.called is not None, f"vLLM was never started:\n{self.stderr}"
        return self.called["env"]


class Sandbox:
    """A world-readable directory with a model copy, a fake vllm and a work dir."""

    def __init__(self, model: Optional[Path] = None, as_nobody: bool = False) -> None:
        self.as_nobody = as_nobody
        self.python = (nobody_python() if as_nobody else None) or sys.executable
        self.base = Path(tempfile.mkdtemp(prefix="compat-harness-"))
        self.base.chmod(0o755)
        self.model = self.base / "model"
        if model is not None:
            shutil.copytree(model, self.model, symlinks=True)
        else:
            self.model.mkdir()
        self.record = self.base / "record" / "vllm-called.jsonl"
        self.record.parent.mkdir()
        self.record.parent.chmod(0o777)
        self.vllm = self.base / "bin" / "vllm"
        self.vllm.parent.mkdir()
        self.vllm.write_text(
            f"#!{self.python} -S\n"
            "import json, os, sys\n"
            "# /proc, not os.environ: this Python's own locale coercion must not be recorded as the launcher's\n"
            "raw = open('/proc/self/environ', 'rb').read().split(b'\\0')\n"
            "env = dict(os.fsdecode(e).split('=', 1) for e in raw if b'=' in e)\n"
            f"open({str(self.record)!r}, 'a').write(json.dumps({{'argv': sys.argv, 'env': env}}) + '\\n')\n"
        )
        self.vllm.chmod(0o755)
        self.work = self.base / "work"
        self.work.mkdir()
        self.work.chmod(0o777)
        self.make_readable(self.model)

    @staticmethod
    def make_readable(path: Path) -> None:
        for root, _dirs, files in os.walk(path):
            os.chmod(root, os.stat(root).st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            for name in files:
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    os.chmod(full, os.stat(full).st_mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)

    def cleanup(self) -> None:
        for root, dirs, _ in os.walk(self.base):
            for name in dirs:
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    os.chmod(full, 0o755)
        shutil.rmtree(self.base, ignore_errors=True)

    def env(self, **extra: str) -> Dict[str, str]:
        """The environment a container would start with: no locale, nothing of the test's own."""
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": "/nonexistent" if self.as_nobody else str(self.base),
            "MODEL_DIR": str(self.model),
            "COMPAT_CARD": "nv-a100",
            "COMPAT_WORK_DIR": str(self.work),
            "COMPAT_VLLM": str(self.vllm),
            "COMPAT_ENGINE_PYTHON": str(self.base / "no-engine-python"),
        }
        env.update(extra)
        return env

    def called(self) -> Optional[dict]:
        lines = self.record.read_text().splitlines() if self.record.exists() else []
        return json.loads(lines[-1]) if lines else None

    def calls(self) -> int:
        return len(self.record.read_text().splitlines()) if self.record.exists() else 0

    def _run(self, cmd: List[str], env: Dict[str, str], close_fds: Sequence[int], timeout: float) -> Result:
        before = self.calls()

        def preexec() -> None:
            for fd in close_fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

        kwargs = {}
        if self.as_nobody:
            kwargs = {"user": NOBODY, "group": NOBODY, "extra_groups": []}
        start = time.monotonic()
        proc = subprocess.run(
            cmd,
            env=env,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            cwd="/",
            preexec_fn=preexec if close_fds else None,
            **kwargs,
        )
        elapsed = time.monotonic() - start
        called = self.called() if self.calls() > before else None
        return Result(proc, called, elapsed)

    def launch(
        self,
        args: Sequence[str],
        env: Dict[str, str],
        faults: Sequence[Sequence[str]] = (),
        close_fds: Sequence[int] = (),
        timeout: float = 120,
    ) -> Result:
        cmd = [self.python, "-c", CHILD, str(ROOT), json.dumps([list(f) for f in faults]), *args]
        return self._run(cmd, env, close_fds, timeout)

    def bootstrap(self, args: Sequence[str], env: Dict[str, str], close_fds: Sequence[int] = (), timeout: float = 120) -> Result:
        """`python3 common/bootstrap.py launch -- ARGS`, as the entrypoint execs it."""
        cmd = [self.python, str(ROOT / "common" / "bootstrap.py"), "launch", "--", *args]
        return self._run(cmd, env, close_fds, timeout)

    def entrypoint(self, args: Sequence[str], env: Dict[str, str], close_fds: Sequence[int] = (), timeout: float = 120) -> Result:
        env = dict(env)
        env.setdefault("COMPAT_HOME", str(ROOT))
        env.setdefault("COMPAT_PYTHON", self.python)
        return self._run(["/bin/bash", str(ROOT / "common" / "entrypoint.sh"), *args], env, close_fds, timeout)


# What bash itself puts into the environment of what it execs.
SHELL_VARS = {"PWD", "OLDPWD", "_", "SHLVL"}
