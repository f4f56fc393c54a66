"""Imports only run down: the project's modules, with the imports inside functions (the lazy ones
the start path uses to stay cheap) counted as imports, form no loop, so every module stands on a
floor above everything it imports. A loop is a module importing from a layer above it (the rules
from the registry that imports them, a helper from its caller), which is what this test refuses."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path
from typing import Dict, Optional, Set

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "common" / "vllm_plugin"
# Where the project's Python lives; the plugin directory is on the engine's PYTHONPATH, so its
# packages import each other by absolute name (compat_backports.x).
PACKAGES = ("common", "conformance", "compat_build", "scripts")


def module_file(base: Path, dotted: str) -> Optional[Path]:
    path = base.joinpath(*dotted.split(".")) if dotted else base
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(path: Path) -> Set[Path]:
    """The project modules `path` names in an import, anywhere in it: the module itself where the
    name is one (`from . import scopes`), else the package the name comes from. A package's
    __init__ run on the way to a submodule is Python's doing, not the importer's: not an edge."""
    out: Set[Path] = set()

    def absolute(dotted: str) -> bool:
        for base in (ROOT, PLUGIN):
            found = module_file(base, dotted)
            if found is not None:
                out.add(found)
                return True
        return False

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                absolute(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.level:
            package = path.parent
            for _ in range(node.level - 1):
                package = package.parent
            for alias in node.names:
                found = module_file(package, ".".join(filter(None, [node.module, alias.name]))) or module_file(package, node.module or "")
                if found is not None:
                    out.add(found)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if not absolute(f"{node.module}.{alias.name}"):
                    absolute(node.module)
    out.discard(path)
    return out


def graph() -> Dict[str, Set[str]]:
    files = [p for name in PACKAGES for p in (ROOT / name).rglob("*.py") if "__pycache__" not in p.parts]
    return {str(p.relative_to(ROOT)): {str(t.relative_to(ROOT)) for t in imported(p)} for p in files}


def test_the_graph_is_read_from_real_imports():
    edges = graph()
    assert len(edges) > 100
    assert "common/preflight.py" in edges["common/launch.py"]
    # an import inside a function counts: R4 reads the backports' table only when it runs
    assert "common/vllm_plugin/compat_backports/__init__.py" in edges["common/rules/r4_architectures.py"]
    # `from . import scopes` is the submodule; `from .base import Rule` the module it names
    assert {"common/rules/support/scopes.py", "common/rules/support/base.py"} <= edges["common/rules/__init__.py"]


def test_no_module_imports_from_a_layer_above_it():
    try:
        order = list(graphlib.TopologicalSorter(graph()).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"an import loop (each imports the next): {' -> '.join(exc.args[1])}") from None
    assert order
