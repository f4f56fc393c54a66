"""The two places that import the runtime package by name with its root LAST on sys.path (the
engine checks' process, and the engine process's CPU MoE path) say so when a package called
`common` in the engine's image is found first, instead of failing on a missing submodule."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def foreign_common(tmp_path: Path) -> Path:
    """A site folder holding a vendor's top-level `common` package."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "__init__.py").write_text("VENDOR = True\n")
    return tmp_path


def test_the_engine_checks_name_a_foreign_common_and_check_nothing(tmp_path):
    site = foreign_common(tmp_path)
    run = subprocess.run(
        [sys.executable, str(ROOT / "common" / "engine_checks" / "process.py")],
        input="[]",
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    [answer] = [json.loads(line) for line in run.stdout.splitlines()]
    assert answer["ok"] is False
    assert str(site / "common" / "__init__.py") in answer["reason"] and "shadows it" in answer["reason"]


def test_the_engine_checks_run_when_common_is_the_runtimes():
    run = subprocess.run(
        [sys.executable, str(ROOT / "common" / "engine_checks" / "process.py")],
        input="[]",
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert (run.returncode, run.stdout) == (0, ""), run.stderr


def test_the_cpu_moe_path_names_a_foreign_common(tmp_path):
    site = foreign_common(tmp_path)
    code = "import compat_patches.cpu_moe as m\ntry:\n    m.grouped_core()\nexcept ImportError as exc:\n    print(exc)\n"
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=site,  # not the checkout, whose own common/ `-c` would put first
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{site}:{ROOT / 'common' / 'vllm_plugin'}", "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert f"{ROOT}/common" in run.stdout and str(site / "common" / "__init__.py") in run.stdout


@pytest.mark.xfail(
    strict=True,
    reason="the checks' process answers a foreign common under index None, which verify does not read: "
    "the verdict says 'verification exited 2: no output' (mend: refuse only the requests that import the "
    "runtime, and carry an unnumbered answer's reason into the missing requests' verdicts, ok None)",
)
def test_the_verdict_a_user_reads_names_a_foreign_common_and_says_unverified(tmp_path):
    site = foreign_common(tmp_path)
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from common.start import verify\n"
        "[v] = verify.run_checks([{'kind': 'tokenizer', 'path': '/nonexistent'}], dict(os.environ))\n"
        "print(v.ok, v.reason)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=site,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert run.stdout.startswith("None ") and str(site / "common" / "__init__.py") in run.stdout, run.stdout + run.stderr
