"""Who started a container: the label each container the project starts carries (the release
gate's, the image tier's), so that what a killed run left can be told from what a live run still
uses. `make test` removes, when it starts, the labelled containers whose owner is gone
(compat_build.prune); a live owner's containers are never touched, on a daemon other checkouts share.

The owner is `HOST/PID/START`: the process, and its start time in clock ticks after boot, so a
reused pid is not mistaken for the owner.
"""

from __future__ import annotations

import os
import socket
from typing import Dict, Optional

LABEL = "io.enginex.owner"


def _start_ticks(pid: int) -> Optional[str]:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return data[data.rindex(b")") + 2 :].split()[19].decode()  # field 22, after "pid (comm) state"
    except (OSError, ValueError, IndexError):
        return None


def owner(pid: Optional[int] = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{_start_ticks(pid) or '?'}"


def labels() -> Dict[str, str]:
    """The labels of a container this process starts."""
    return {LABEL: owner()}


def alive(value: str) -> Optional[bool]:
    """Whether the owner named by a label's value still runs: None when it cannot be told here
    (another host, an unreadable value): such a container is left alone."""
    host, _, rest = value.partition("/")
    pid, _, start = rest.partition("/")
    if host != socket.gethostname() or not pid.isdigit() or not start:
        return None
    if start == "?":
        return os.path.exists(f"/proc/{pid}")
    return _start_ticks(int(pid)) == start
