"""Where the project keeps what outlives a checkout: `${XDG_CACHE_HOME:-~/.cache}/enginex-compat`
(the venvs, the Docker daemon's data, the local bases, the tests' registry, the test durations),
so that a fresh clone on the same machine builds nothing twice. scripts/make-venv.sh and
scripts/with-docker.sh name the same folder in shell. Standard library only."""

from __future__ import annotations

import os


def root() -> str:
    """The project's cache folder (not created here)."""
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "enginex-compat")
