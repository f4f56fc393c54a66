"""Each engine venv's vLLM cache given vLLM's model-class inspections before the suite starts:
`python -m harness.vllm_caches [VENV...]` (every engine venv there is when none is named).

The tests' engine starts keep vLLM's own cache per venv (harness.engine.vllm_cache). In an empty
one, vLLM >= 0.10 pays a subprocess that imports vLLM again (8-10 s here) the first time each
architecture is resolved, in whichever test or conformance cell resolves it first: a run from
empty caches paid that 18 times (14 on 0.11, 4 on 0.32), a warm run never. compat_build/image_steps/
bake_modelinfos.py writes them all at once with vLLM's own code (about 12 s per venv, most of
it vLLM's import), once per venv: a marker beside them says it ran (a new venv spec is a new
venv, so a new cache). `make test` and `make conformance` run it beside the other set-up steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List

from harness.engine import ENGINES, ROOT, Engine, vllm_cache

MARKER = ".modelinfos-baked"


def bake(engines: Iterable[Engine]) -> int:
    """Bakes every engine's cache not yet baked, side by side; returns the number that failed."""
    running = []
    for engine in engines:
        cache = Path(vllm_cache(engine.venv))
        if (cache / MARKER).exists():
            continue
        argv = [str(engine.python), "-m", "compat_build.image_steps.bake_modelinfos", str(cache)]
        env = dict(engine.env(), PYTHONPATH=str(ROOT))
        running.append(
            (engine, cache, subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        )
    failed = 0
    for engine, cache, proc in running:
        out, _ = proc.communicate()
        lines = out.strip().splitlines()
        # vLLM's own logging comes first; the step's one line is the last.
        print(f"vllm-caches: {engine.venv}: {lines[-1] if lines else '(no output)'}")
        if proc.returncode == 0:
            cache.mkdir(parents=True, exist_ok=True)
            (cache / MARKER).touch()
        else:
            failed += 1
            print("\n".join(lines[-20:]), file=sys.stderr)
    return failed


def main(argv: List[str]) -> int:
    by_venv = {engine.venv: engine for engine in ENGINES.values()}
    unknown = [v for v in argv if v.rstrip(os.sep) not in by_venv]
    if unknown:
        print(f"vllm-caches: not an engine venv: {' '.join(unknown)} (one of {' '.join(sorted(by_venv))})", file=sys.stderr)
        return 2
    engines = [by_venv[v.rstrip(os.sep)] for v in argv] or list(by_venv.values())
    missing = [e for e in engines if not e.available()]
    for engine in missing:
        print(f"vllm-caches: {engine.missing_reason}", file=sys.stderr)
    return 1 if bake(e for e in engines if e.available()) or missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
