"""Imports only run down: the project's modules, with the imports inside functions (the lazy ones
the start path uses to stay cheap) counted as imports, form no loop, so every module stands on a
floor above everything it imports. A loop is a module importing from a layer above it (the rules
from the registry that imports them, a helper from its caller), which is what this test refuses."""

from __future__ import annotations

import graphlib
from pathlib import Path
from typing import Dict, List, Optional, Set

from compat_build.import_graph import imports

ROOT = Path(__file__).resolve().parents[2]
# Where the project's Python lives (the plugin's and the shims' directories are among them).
PACKAGES = ("common", "conformance", "compat_build", "harness", "scripts")


def graph() -> Dict[str, Set[str]]:
    files = [p for name in PACKAGES for p in (ROOT / name).rglob("*.py") if "__pycache__" not in p.parts]
    return {str(p.relative_to(ROOT)): {str(t.relative_to(ROOT)) for t in imports(p)} for p in files}


def test_the_graph_is_read_from_real_imports():
    edges = graph()
    assert len(edges) > 100
    assert "common/start/preflight.py" in edges["common/start/launch.py"]
    # an import inside a function counts: R4 reads the backports' table only when it runs
    assert "common/vllm_plugin/compat_backports/__init__.py" in edges["common/rules/r4_architectures.py"]
    # `from . import scopes` is the submodule; `from .base import Rule` the module it names
    assert {"common/rules/support/scopes.py", "common/rules/support/base.py"} <= edges["common/rules/__init__.py"]
    # a shim imports through the shim directory, first on the engine's PYTHONPATH under R7
    assert "common/shims/compat_shim_overlay.py" in edges["common/shims/ixformer/__init__.py"]
    # what runs (the fingerprints' reading) adds the packages' __init__ files on the way
    report = ROOT / "conformance" / "report.py"  # from common.model.config_traits import ...
    ran = {str(t.relative_to(ROOT)) for t in imports(report, packages=True)} - {str(t.relative_to(ROOT)) for t in imports(report)}
    assert {"common/__init__.py", "common/model/__init__.py"} <= ran


def loop_free_order(edges: Dict[str, Set[str]], loop: str) -> List[str]:
    """The nodes of `edges` in an order where each comes after what it imports; a loop fails the
    test, named `loop` and listed node by node."""
    try:
        return list(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        raise AssertionError(f"{loop}: {' -> '.join(exc.args[1])}") from None


def test_no_module_imports_from_a_layer_above_it():
    assert loop_free_order(graph(), "an import loop (each imports the next)")


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
    assert set(LAYERS) | {"cli", "plan", "codes", "vllm_plugin", "engine_checks", "build_checks"} <= set(edges)
    assert "rules" in edges["start"] and "model" in edges["rules"] and "start" in edges["doctor"]


def test_no_group_of_common_imports_from_a_group_that_imports_it():
    assert loop_free_order(package_graph(), "a loop between the groups of common/ (each imports the next)")


def test_the_groups_import_only_down():
    edges = package_graph()
    up = [
        f"common/{group}/ imports from common/{other}/"
        for i, group in enumerate(LAYERS)
        for other in sorted(edges.get(group, set()) & set(LAYERS[i + 1 :]))
    ]
    assert not up, up
