"""Where a run's overlay and report.json go: a fresh directory, never inside the model.

Candidates in order: COMPAT_WORK_DIR, TMPDIR (both from the environment the plan is given),
/tmp, /var/tmp, /dev/shm. A candidate that is inside the model directory once symlinks are
resolved is skipped, whatever names it. When no candidate is writable (read-only filesystems,
a full disk), there is no work dir: the repairs that need a file are dropped and the others
(flags, environment) are kept.
"""

from __future__ import annotations


import os
import time

from .log import say

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Mapping, Optional, Tuple

FALLBACK_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


def _inside(real_path: str, real_root: str) -> bool:
    """Whether a resolved path is `real_root` or below it."""
    return real_path == real_root or real_path.startswith(real_root.rstrip(os.sep) + os.sep)


def _candidates(env: Mapping[str, str]) -> List[Tuple[str, str, str]]:
    """(what names it, directory, prefix of the fresh dir), in order of preference."""
    out = []
    if env.get("COMPAT_WORK_DIR"):
        out.append(("COMPAT_WORK_DIR", env["COMPAT_WORK_DIR"], "run-"))
    if env.get("TMPDIR"):
        out.append(("TMPDIR", env["TMPDIR"], "compat-"))
    out += [(root, root, "compat-") for root in FALLBACK_ROOTS]
    return out


def make_run_dir(env: Mapping[str, str], model_dir: str) -> Optional[str]:
    """A new private directory outside `model_dir`, or None when none can be made anywhere."""
    model = os.path.realpath(model_dir)
    tried = set()
    for label, root, prefix in _candidates(env):
        if root in tried:
            continue
        tried.add(root)
        try:
            parent = os.path.realpath(root)  # symlinks resolved: the directory really written
            if _inside(parent, model):
                say(f"{label} {root} is inside the model directory, which is never written; not used")
                continue
            if label == "COMPAT_WORK_DIR":
                os.makedirs(parent, exist_ok=True)
            return _fresh_dir(parent, prefix)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            if label in ("COMPAT_WORK_DIR", "TMPDIR"):
                say(f"{label} {root} is not writable ({reason}); trying the next place")
    say("no writable work directory outside the model: repairs that need a file are dropped, the others kept")
    return None


def _fresh_dir(parent: str, prefix: str) -> str:
    """A new private directory (what tempfile.mkdtemp does, without importing tempfile's
    random/hashlib chain at every container start)."""
    for attempt in range(100):
        path = os.path.join(parent, f"{prefix}{os.getpid()}-{time.time_ns() % 10**9}-{attempt}")
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
    raise OSError(f"no fresh directory could be made in {parent}")
