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
PACKAGES = ("common", "conformance", "compat_build", "harness", "scripts")


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
    assert "common/start/preflight.py" in edges["common/start/launch.py"]
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


# The groups of common/, bottom first: a group imports only from the groups before it (and from
# the package's top-level modules: plan.py and code_kinds.py below the rules, codes.py above them).
LAYERS = ("model", "engine", "memory", "rules", "start", "doctor")


def package_graph() -> Dict[str, Set[str]]:
    """common/'s imports between its groups: a folder of common/ is one node, a module at its top
    level another (cli.py above all, plan.py, codes.py ...)."""

    def node(path: str) -> Optional[str]:
        parts = Path(path).parts
        if parts[0] != "common":
            return None
        return parts[1] if len(parts) > 2 else parts[1].removesuffix(".py")

    out: Dict[str, Set[str]] = {}
    for path, targets in graph().items():
        source = node(path)
        if source is None:
            continue
        out.setdefault(source, set()).update(t for t in map(node, targets) if t is not None and t != source)
    return out


def test_the_package_graph_is_read_from_real_imports():
    edges = package_graph()
    assert set(LAYERS) | {"cli", "plan", "codes", "vllm_plugin", "checks", "image_checks"} <= set(edges)
    assert "rules" in edges["start"] and "model" in edges["rules"] and "start" in edges["doctor"]


def test_no_group_of_common_imports_from_a_group_that_imports_it():
    try:
        order = list(graphlib.TopologicalSorter(package_graph()).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"a loop between the groups of common/ (each imports the next): {' -> '.join(exc.args[1])}") from None
    assert order


def test_the_groups_import_only_down():
    edges = package_graph()
    up = [
        f"common/{group}/ imports from common/{other}/"
        for i, group in enumerate(LAYERS)
        for other in sorted(edges.get(group, set()) & set(LAYERS[i + 1 :]))
    ]
    assert not up, up
