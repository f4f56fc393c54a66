"""Session fixtures shared by the unit tests (common/tests) and integration tests (tests/)."""

import json
import os
import stat
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from tests.fixtures.factory import build  # noqa: E402


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Tiny models saved by their authors' transformers, built once per session on demand."""
    base = tmp_path_factory.mktemp("models")
    cache = {}

    def get(name: str) -> Path:
        if name not in cache:
            saved_by, style = name.split("-", 1)
            extra = ("--no-chat-template",) if style.endswith("-notemplate") else ()
            cache[name] = build(saved_by, style.replace("-notemplate", ""), base / name, *extra)
        return cache[name]

    return get


@pytest.fixture
def fake_vllm(tmp_path):
    """A `vllm` on PATH that records the argv and environment it was exec'd with."""
    record = tmp_path / "vllm-called.json"
    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps({{'argv': sys.argv, 'env': dict(os.environ)}}) + '\\n')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def called():
        """The last call's argv and environment, or None when vllm was never started."""
        lines = record.read_text().splitlines() if record.exists() else []
        return json.loads(lines[-1]) if lines else None

    called.count = lambda: len(record.read_text().splitlines()) if record.exists() else 0
    return script, called


def write_json(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def env_for_tests(fake_vllm, tmp_path):
    """Environment for running the launcher against a fake vllm and the dev venv's transformers."""
    script, _ = fake_vllm
    env = dict(os.environ)
    env["PATH"] = f"{script.parent}{os.pathsep}{env['PATH']}"
    env["COMPAT_ENGINE_PYTHON"] = sys.executable  # .venv: transformers 4.57, as on nv-a100
    env["COMPAT_WORK_DIR"] = str(tmp_path / "work")
    env["COMPAT_CARD"] = "nv-a100"
    env.pop("COMPAT_DISABLE", None)
    return env
