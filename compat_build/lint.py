"""Every linter of the project, defined once: `make lint`, the test suite (tests/integration/test_lint.py)
and `make release-check` run these same commands with the same settings.

usage: python -m compat_build.lint [NAME ...]      (default: all; names: see LINTERS)
"""

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import manifest as manifest_mod

ROOT = manifest_mod.ROOT
PYTHON_PATHS = ("common", "compat_build", "conformance", "harness", "tests", "scripts", "conftest.py")
WORKFLOWS = ".gitea/workflows"
ACTIONLINT_CONFIG = ".gitea/actionlint.yaml"  # the project runners' labels


def tool(name: str) -> Optional[str]:
    """A lint tool from the dev venv (next to this interpreter) or PATH."""
    local = os.path.join(os.path.dirname(sys.executable), name)
    return local if os.path.exists(local) else shutil.which(name)


def shell_scripts() -> List[str]:
    found = ["common/entrypoint.sh", ".ci/run"]
    for pattern in ("scripts/*.sh", "envs/*/*.sh"):
        found += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern)))
    return found


def workflows() -> List[str]:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, WORKFLOWS, "*.yml")))


def _dockerfiles(tmp: str) -> List[str]:
    """Every card's Dockerfile, rendered into `tmp` (lint never touches build/)."""
    from .render import render_card

    manifest = manifest_mod.load()
    return [os.path.join(render_card(manifest.cards[n], tmp), "Dockerfile") for n in manifest_mod.card_names(manifest)]


# name -> (tool, arguments given the temp dir for rendered files)
LINTERS: Dict[str, Tuple[str, Callable[[str], List[str]]]] = {
    "ruff": ("ruff", lambda tmp: ["check", *PYTHON_PATHS]),
    "ruff-format": ("ruff", lambda tmp: ["format", "--check", *PYTHON_PATHS]),
    # The runtime package runs on the BI-100 image's Python 3.10.
    # The runtime package and the conformance code that runs under vLLM 0.5.5's Python 3.10.
    "vermin": (
        "vermin",
        lambda tmp: ["--no-tips", "--violations", "-t=3.10-", "common", "harness/engine_worker.py", "conformance/build.py"],
    ),
    # Every script here is bash; the env install scripts are sourced by make-venv.sh and have no shebang.
    "shellcheck": ("shellcheck", lambda tmp: ["-S", "style", "--shell=bash", *shell_scripts()]),
    "hadolint": ("hadolint", lambda tmp: ["--failure-threshold", "error", *_dockerfiles(tmp)]),
    "actionlint": ("actionlint", lambda tmp: ["-config-file", ACTIONLINT_CONFIG, *workflows()]),
}


def run(name: str) -> Tuple[bool, str]:
    """(passed, output) of one linter."""
    program, arguments = LINTERS[name]
    path = tool(program)
    if path is None:
        return False, f"{program} not found: run `make venv`"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
        result = subprocess.run([path, *arguments(tmp)], cwd=ROOT, capture_output=True, text=True, env=env)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def main(argv: Optional[Sequence[str]] = None) -> int:
    names = list(argv if argv is not None else sys.argv[1:]) or list(LINTERS)
    unknown = [n for n in names if n not in LINTERS]
    if unknown:
        print(f"lint: unknown linter(s) {', '.join(unknown)} (known: {', '.join(LINTERS)})", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        ok, output = run(name)
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
        if not ok:
            failed.append(name)
            print(output)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
