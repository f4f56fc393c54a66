"""Where a run's overlay and report.json go: a fresh directory, never inside the model."""

import os
import tempfile
from typing import Mapping

from .log import say


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
            return tempfile.mkdtemp(prefix="run-", dir=root)
        except OSError as exc:
            say(f"COMPAT_WORK_DIR {root} is not writable ({exc.strerror}); using a temporary directory")
    return tempfile.mkdtemp(prefix="compat-")
