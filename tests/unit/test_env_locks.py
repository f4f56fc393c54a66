"""Every venv the project builds is locked: envs/<name>/lock.txt pins every distribution, and each
pip install of its install.sh runs under it, so that a rebuild gives the same engine (the built
venvs are held to their locks in tests/e2e/test_env_locks.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCKED = ("author", "dev", "engine", "engine055", "engine-next")
PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")


@pytest.mark.parametrize("name", LOCKED)
def test_each_venvs_lock_pins_every_distribution(name):
    lines = [ln.strip() for ln in (ROOT / "envs" / name / "lock.txt").read_text(encoding="utf-8").splitlines()]
    pins = [ln for ln in lines if ln and not ln.startswith("#")]
    assert len(pins) > 30, f"envs/{name}/lock.txt pins {len(pins)} distributions"
    assert [p for p in pins if not PIN.match(p)] == []
    names = [p.split("==")[0].lower().replace("_", "-") for p in pins]
    assert len(names) == len(set(names)), "a distribution pinned twice"


@pytest.mark.parametrize("name", LOCKED)
def test_each_pip_install_of_an_env_runs_under_its_lock(name):
    installs = [
        ln
        for ln in (ROOT / "envs" / name / "install.sh").read_text(encoding="utf-8").splitlines()
        if re.search(r'"\$PY" -m pip install ', ln)
    ]
    assert installs
    # vLLM 0.5.5's own build from its sha256-checked source archive: no index has it, so no lock does.
    unlocked = [ln for ln in installs if '-c "$spec/lock.txt"' not in ln and not ln.rstrip().endswith('"$src"')]
    assert unlocked == []


def test_every_env_that_installs_is_locked():
    """A new env with an install.sh gets a lock too (the release env is hash-locked in its requirements)."""
    with_install = sorted(p.parent.name for p in (ROOT / "envs").glob("*/install.sh"))
    assert with_install == sorted(LOCKED)
