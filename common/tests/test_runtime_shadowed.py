"""The two places that import the runtime package by name with its root LAST on sys.path (the
engine checks' process, and the engine process's CPU MoE path) say so when a package called
`common` in the engine's image is found first, instead of failing on a missing submodule; the
checks that need no runtime module are made all the same."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROCESS = ROOT / "common" / "engine_checks" / "process.py"


def foreign_common(tmp_path: Path) -> Path:
    """A site folder holding a vendor's top-level `common` package."""
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "__init__.py").write_text("VENDOR = True\n")
    return tmp_path


def answers(requests: list, env: dict) -> tuple:
    run = subprocess.run([sys.executable, str(PROCESS)], input=json.dumps(requests), capture_output=True, text=True, env=env, timeout=120)
    return run.returncode, [json.loads(line) for line in run.stdout.splitlines()], run.stderr


def test_the_engine_checks_name_a_foreign_common_and_still_make_the_checks_that_need_no_runtime_module(tmp_path):
    site = foreign_common(tmp_path)
    missing = tmp_path / "no-model"
    requests = [{"kind": "module", "name": "json"}, {"kind": "layer_api", "requires": {}}, {"kind": "config", "path": str(missing)}]
    rc, got, stderr = answers(requests, {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})
    assert rc == 0 and [a["index"] for a in got] == [0, 1, 2], stderr
    for runtime in got[:2]:
        assert runtime["ok"] is None
        assert str(site / "common" / "__init__.py") in runtime["reason"] and "shadows it" in runtime["reason"]
    # The config check imports no runtime module: it is made, and fails on the missing folder.
    assert got[2]["ok"] is False and "shadows" not in got[2]["reason"]


def test_the_engine_checks_run_when_common_is_the_runtimes():
    rc, got, stderr = answers([{"kind": "module", "name": "json"}], {"PATH": "/usr/bin:/bin"})
    assert rc == 0, stderr
    [answer] = got
    assert answer["ok"] is True and answer["path"].endswith("json/__init__.py")


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


def test_the_verdict_a_user_reads_names_a_foreign_common_and_says_unverified(tmp_path):
    site = foreign_common(tmp_path)
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from common.start import verify\n"
        "[v] = verify.run_checks([{'kind': 'module', 'name': 'vllm.config'}], dict(os.environ))\n"
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
    assert run.stdout.startswith("None cannot tell: ") and str(site / "common" / "__init__.py") in run.stdout, run.stdout + run.stderr
