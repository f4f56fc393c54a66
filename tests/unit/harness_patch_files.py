"""The harness patches of the engine venvs (envs/*/cpu_*.py) are scripts install.sh runs by path,
not modules of a package: their tests load each from its file, the one way written here."""

import importlib.util
from pathlib import Path
from types import ModuleType


def load(path: Path) -> ModuleType:
    """The script at `path` as a module named after its file (executed once a call)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
