"""The harness patches of the engine venvs (envs/*/cpu_*.py) are scripts install.sh runs by path,
not modules of a package: their tests load each from its file, the one way written here."""

import ast
import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import pytest


def load(path: Path) -> ModuleType:
    """The script at `path` as a module named after its file (executed once a call)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def needs_upstream(upstream: Path, files: Iterable[str]) -> pytest.MarkDecorator:
    """Skips a module whose upstream vLLM sources (`make upstream-src`) lack `files`."""
    return pytest.mark.skipif(not all((upstream / f).exists() for f in files), reason="no upstream sources: run `make upstream-src`")


def upstream_package(upstream: Path, files: Sequence[str], needed: Optional[Sequence[str]] = None) -> Tuple[Any, Any]:
    """A patch test module's (pytestmark, package fixture): the module skips where the upstream
    sources lack `needed` (default: `files`), and `package` is `files` copied into tmp_path in
    their layout, the tree a patch edits in a test (never the sources themselves)."""

    @pytest.fixture(name="package")
    def package(tmp_path: Path) -> Path:
        for rel in files:
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(upstream / rel, tmp_path / rel)
        return tmp_path

    return needs_upstream(upstream, files if needed is None else needed), package


def function_source(path: Path, name: str, cls: str = "") -> str:
    """The source of the function `name` at the top of the file `path`, or a method of its class `cls`."""
    text = path.read_text()
    body = ast.parse(text).body
    if cls:
        [klass] = [n for n in body if isinstance(n, ast.ClassDef) and n.name == cls]
        body = klass.body
    [fn] = [n for n in body if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.get_source_segment(text, fn)


def edits_land_once(patch: ModuleType, package: Path, files: Sequence[str]) -> Dict[str, str]:
    """Applies `patch` (its EDITS) to `package` twice: the first time each edit lands, the second
    changes nothing. Returns the edited text of each of `files`."""
    assert patch.apply(package) == [f"{rel} edited" for rel, _, _ in patch.EDITS]
    edited = {rel: (package / rel).read_text() for rel in files}
    assert patch.apply(package) == [f"{rel} already edited" for rel, _, _ in patch.EDITS]
    assert {rel: (package / rel).read_text() for rel in files} == edited
    return edited
