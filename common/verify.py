"""Run a verification script under the engine's Python with a time limit."""

from __future__ import annotations


import json
import os
import sys

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Mapping, Optional

CHECKS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checks")
DEFAULT_TIMEOUT_S = 60.0


class Verdict:
    __slots__ = ("ok", "reason")

    def __init__(self, ok: Optional[bool], reason: str) -> None:
        self.ok = ok  # None: could not be checked here (no engine transformers, no Python)
        self.reason = reason


def engine_python(env: Mapping[str, str]) -> str:
    """The interpreter whose transformers the engine uses: in an image, the one running us."""
    return env.get("COMPAT_ENGINE_PYTHON") or sys.executable


def run_check(script: str, args: List[str], env: Mapping[str, str]) -> Verdict:
    import subprocess  # only when a repair needs checking: the clean path never pays for it

    try:
        timeout = float(env.get("COMPAT_VERIFY_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        timeout = DEFAULT_TIMEOUT_S
    python = engine_python(env)
    child_env = dict(os.environ)
    child_env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    child_env["HF_HUB_OFFLINE"] = "1"  # a check must never reach for a hub
    try:
        proc = subprocess.run(
            [python, os.path.join(CHECKS_DIR, script)] + args,
            capture_output=True, text=True, timeout=timeout, env=child_env, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Verdict(False, f"verification timed out after {timeout:g}s")
    except OSError as exc:
        return Verdict(None, f"verification could not start {python} ({exc.strerror})")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return Verdict(False, f"verification exited {proc.returncode}: {tail[:300]}")
    try:
        result = json.loads(lines[-1])
    except ValueError:
        return Verdict(False, "verification printed no readable result")
    return Verdict(result.get("ok"), str(result.get("reason", "")))
