"""The venvs `make test` built are their locks: what pip installed is, distribution for
distribution, envs/<name>/lock.txt (`scripts/lock_envs.py --check NAME`). No engine is started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCKED = ("author", "dev", "engine", "engine055", "engine-next")


@pytest.mark.parametrize("name", LOCKED)
def test_the_built_venv_is_its_lock(name):
    run = subprocess.run([sys.executable, "scripts/lock_envs.py", "--check", name], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
