"""Small helpers for the unit tests: model directories written from plain JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from common.image_checks.selftest import tree_digest  # noqa: F401 - one digest for the image's self-test and the tests

ROOT = Path(__file__).resolve().parents[2]


def model_dir(path: Path, files: Dict[str, object]) -> Path:
    """A model directory whose files are JSON-dumped objects, or raw str/bytes contents."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = path / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(json.dumps(content))
    return path


def find_python(version: str) -> Optional[str]:
    """An interpreter of `version` ("3.10") that really runs: on PATH, or a pyenv install."""
    import shutil

    candidates = [shutil.which(f"python{version}")]
    if shutil.which("pyenv"):
        bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
        for name in bare:
            if name.startswith(version + "."):
                prefix = subprocess.run(["pyenv", "prefix", name], capture_output=True, text=True).stdout.strip()
                candidates.append(os.path.join(prefix, "bin", f"python{version}"))
    for candidate in filter(None, candidates):
        try:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
                return candidate
        except OSError:
            continue
    return None


def run_common(args: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """`python -m common ARGS` from the repo root, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "common", *args], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)


def launch(env: Dict[str, str], model: Path, args: List[str]) -> subprocess.CompletedProcess:
    """What the entrypoint runs: `python -m common launch -- ARGS` with MODEL_DIR set."""
    return run_common(["launch", "--", *args], dict(env, MODEL_DIR=str(model)))


def preflight_json(model: Path, card: str = "nv-a100", vllm_args: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None) -> dict:
    # The tests read the files the plan wrote: kept (a plain dry run removes them).
    proc = run_common(["preflight", str(model), "--card", card, "--dry-run", "--keep-work-dir", "--json", "--", *(vllm_args or [])], env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)
