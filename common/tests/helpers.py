"""Small helpers for the unit tests: model directories written from plain JSON."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

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


def tree_digest(path: Path) -> str:
    """Names, kinds, sizes, mtimes and contents of a tree: any write to it changes the digest."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(dirs + files):
            full = os.path.join(root, name)
            st = os.lstat(full)
            h.update(f"{os.path.relpath(full, path)}|{st.st_mode}|{st.st_size}|{st.st_mtime_ns}".encode())
            if os.path.isfile(full) and not os.path.islink(full) and st.st_size < 50 * 1024 * 1024:
                h.update(Path(full).read_bytes())
    return h.hexdigest()


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
