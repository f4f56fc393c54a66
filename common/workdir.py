"""Where a run's overlay and report.json go: a fresh directory, never inside the model."""

from __future__ import annotations


import os
import time

from .log import say

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Mapping


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root + os.sep)


def make_run_dir(env: Mapping[str, str], model_dir: str) -> str:
    root = env.get("COMPAT_WORK_DIR") or None
    if root and _inside(root, model_dir):
        say(f"COMPAT_WORK_DIR {root} is inside the model directory, which is never written; using a temporary directory")
        root = None
    if root:
        try:
            os.makedirs(root, exist_ok=True)
            return _fresh_dir(root, "run-")
        except OSError as exc:
            say(f"COMPAT_WORK_DIR {root} is not writable ({exc.strerror}); using a temporary directory")
    return _fresh_dir(os.environ.get("TMPDIR") or "/tmp", "compat-")


def _fresh_dir(parent: str, prefix: str) -> str:
    """A new private directory (what tempfile.mkdtemp does, without importing tempfile's
    random/hashlib chain at every container start)."""
    for attempt in range(100):
        path = os.path.join(parent, f"{prefix}{os.getpid()}-{time.time_ns() % 10 ** 9}-{attempt}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise OSError(f"no fresh directory could be made in {parent}")
