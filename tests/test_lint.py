"""Lint as part of the suite: the runtime package stays Python 3.10 compatible, scripts are clean."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*cmd):
    return subprocess.run([str(c) for c in cmd], cwd=str(ROOT), capture_output=True, text=True)


def test_ruff():
    proc = run(BIN / "ruff", "check", "common", "compat_build", "tests", "scripts", "conftest.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_runtime_package_needs_no_newer_python_than_310():
    proc = run(BIN / "vermin", "--no-tips", "--violations", "-t=3.10-", "common")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shell_scripts_are_shellcheck_clean():
    scripts = ["common/entrypoint.sh", ".ci/run", *map(str, ROOT.glob("scripts/*.sh"))]
    proc = run(BIN / "shellcheck", "-S", "style", *scripts)
    assert proc.returncode == 0, proc.stdout
