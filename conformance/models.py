"""The saved tiny models of the cases, made once per case and saver in a cache outside the
checkout (as the venvs are), by conformance/build.py under each saver's Python."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Sequence

from .cases import AUTHOR, ROOT, SAVERS, case_key

CACHE = Path(
    os.environ.get("COMPAT_CONFORMANCE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "enginex-compat" / "conformance"
)


def model_dir(case: Dict[str, Any], saver: str) -> Path:
    """Where the case's model saved by `saver` lives: DIR/model/ and DIR/record.json."""
    return CACHE / "models" / f"{case['name']}-{saver}-{case_key(case, saver)}"


def record(case: Dict[str, Any], saver: str) -> Dict[str, Any]:
    path = model_dir(case, saver) / "record.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _run(saver: str, jobs: List[Dict[str, Any]], log: Any) -> None:
    python = SAVERS[saver].python
    if not python.exists():
        raise RuntimeError(f"{python} is missing: run `make {SAVERS[saver].make_target}`")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore", TOKENIZERS_PARALLELISM="false")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"saver": "v5" if saver == AUTHOR.name else "legacy", "jobs": jobs}, fh)
    try:
        subprocess.run(
            [str(python), "-m", "conformance.build", fh.name], cwd=str(ROOT), env=env, check=True, stdout=log, stderr=subprocess.STDOUT
        )
    finally:
        os.unlink(fh.name)


def ensure(cases: Sequence[Dict[str, Any]], savers: Sequence[str], log: Any = None) -> None:
    """Make every (case, saver) model not yet in the cache: the author's first (the others save
    its weights again), one process per saver."""
    order = [AUTHOR.name] + [s for s in savers if s != AUTHOR.name]
    for saver in order:
        jobs = []
        for case in cases:
            if (model_dir(case, saver) / "record.json").exists():
                continue
            job = {"case": case, "shape": case["shape"], "out": str(model_dir(case, saver))}
            if saver != AUTHOR.name:
                job["source"] = str(model_dir(case, AUTHOR.name))
            jobs.append(job)
        if jobs:
            _run(saver, jobs, log)
