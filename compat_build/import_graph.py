"""The project's import graph, read from the source: the one reader the import-graph test
(tests/unit/test_import_graph.py: imports only run down) and the conformance fingerprints
(conformance/fingerprint.py: the files on a cell's start path) share.

Every import counts, those inside functions too (the start path imports lazily to stay cheap). An
absolute name resolves against the checkout, the plugin directory (on the engine's PYTHONPATH:
compat_backports.x) and the shim directory (on it under R7: compat_grouped_experts). Nothing is
imported to read the graph.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import FrozenSet, Iterable, List, Optional, Set

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "common" / "vllm_plugin"
SHIMS = ROOT / "common" / "shims"
IMPORT_ROOTS = (ROOT, PLUGIN, SHIMS)


def module_file(base: Path, dotted: str) -> Optional[Path]:
    """The file `dotted` names under `base`: a module, or a package's __init__.py."""
    path = base.joinpath(*dotted.split(".")) if dotted else base
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _absolute(dotted: str, packages: bool) -> List[Path]:
    """The files an absolute import of `dotted` runs: with `packages`, every package's __init__ on
    the way; without, the module alone. The first import root that has it decides."""
    parts = dotted.split(".")
    for base in IMPORT_ROOTS:
        if packages:
            found = [f for i in range(1, len(parts) + 1) if (f := module_file(base, ".".join(parts[:i])))]
        else:
            found = [f] if (f := module_file(base, dotted)) else []
        if found:
            return found
    return []


def imports(path: Path, packages: bool = False) -> Set[Path]:
    """The project files `path` imports, anywhere in it.

    packages=False (the graph of who depends on whom): the module an import names, where the name
    is one (`from . import scopes`), else the package it comes from; a package's __init__ run on
    the way to a submodule is Python's doing, not the importer's. packages=True (what runs when
    `path` runs, for a fingerprint): those packages' __init__ files too."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return set()
    out: Set[Path] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.update(_absolute(alias.name, packages))
        elif isinstance(node, ast.ImportFrom) and node.level:
            package = path.parent
            for _ in range(node.level - 1):
                package = package.parent
            source = module_file(package, node.module or "")
            for alias in node.names:
                sub = module_file(package, ".".join(filter(None, [node.module, alias.name])))
                if sub is not None:
                    out.add(sub)
                elif source is not None and not packages:
                    out.add(source)
            if packages and source is not None:
                out.add(source)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if packages:
                out.update(_absolute(node.module, True))
            for alias in node.names:
                found = _absolute(f"{node.module}.{alias.name}", packages)
                out.update(found or ([] if packages else _absolute(node.module, False)))
    out.discard(path)
    return out


def closure(roots: Iterable[Path], stops: FrozenSet[Path] = frozenset()) -> FrozenSet[Path]:
    """`roots` and every project file they run, transitively (packages' __init__ files included),
    not through `stops`."""
    seen: Set[Path] = set()
    todo = list(roots)
    while todo:
        path = todo.pop()
        if path in seen or path in stops or not path.is_file():
            continue
        seen.add(path)
        if path.suffix == ".py":
            todo.extend(imports(path, packages=True))
    return frozenset(seen)
