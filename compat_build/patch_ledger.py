"""The ledger of every patch (patch_ledger.toml: what each changes, why, where and when it applies,
until when), and the patches the tree holds, found from the code itself: a patch the ledger does
not name is reported by `unlisted()` (tests/unit/test_patch_ledger.py fails on it).

`python -m compat_build.patch_ledger` prints the ledger, one patch a line, kind first.
Standard library only.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

from . import toml_files

ROOT = Path(__file__).resolve().parents[1]
LEDGER_FILE = Path(__file__).with_suffix(".toml")
KINDS = ("plugin-patch", "plugin-wrap", "registration", "start-edit", "build-patch", "shim", "harness")
FIELDS = ("name", "kind", "files", "changes", "why", "applies", "until")

PLUGIN = "common/vllm_plugin"
# Calls that register a class with a registry the engine or its transformers owns.
REGISTRATIONS = ("register_model", "register")


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str
    files: Tuple[str, ...]
    changes: str
    why: str
    applies: str
    until: str


def load(path: Path = LEDGER_FILE) -> List[Entry]:
    """The ledger's entries; ValueError names an entry that lacks a field or has an unknown kind."""
    entries = []
    for i, raw in enumerate(toml_files.load(path).get("patch", [])):
        missing = [f for f in FIELDS if not raw.get(f)]
        if missing or raw["kind"] not in KINDS or set(raw) - set(FIELDS):
            raise ValueError(
                f"{path.name}: patch {i + 1} ({raw.get('name')!r}): missing {missing}, kind {raw.get('kind')!r}, fields {sorted(raw)}"
            )
        entries.append(Entry(**{k: tuple(raw[k]) if k == "files" else raw[k] for k in FIELDS}))
    return entries


def _python(root: Path, pattern: str) -> Iterator[Path]:
    return (p for p in sorted(root.glob(pattern)) if "__pycache__" not in p.parts)


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    return (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _patches_in(path: Path) -> Set[str]:
    """The kinds of patch a plugin or rule module makes, read from its code: a `setattr` on an
    object it did not create (an engine class or module), a registration with the engine's
    registries, a repair's `engine_patch` (an edit of the engine's source at start)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    kinds = set()
    for call in _calls(tree):
        func = call.func
        if isinstance(func, ast.Name) and func.id == "setattr" and call.args:
            target = call.args[0]
            if not (isinstance(target, ast.Name) and target.id in ("self", "meta", "module_globals")):
                kinds.add("plugin-wrap")
        elif isinstance(func, ast.Attribute) and func.attr in REGISTRATIONS:
            owner = func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("ModelRegistry", "AutoConfig"):
                kinds.add("registration")
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "engine_patch" for t in node.targets):
            kinds.add("start-edit")
    return kinds


def found(root: Path = ROOT) -> Dict[str, Set[str]]:
    """Each file of the tree that holds a patch, with the kinds it holds."""
    out: Dict[str, Set[str]] = {}

    def add(path: Path, kind: str) -> None:
        out.setdefault(path.relative_to(root).as_posix(), set()).add(kind)

    for path in _python(root, f"{PLUGIN}/compat_patches/*.py"):
        if path.name != "__init__.py":
            add(path, "plugin-patch")
    for path in [
        *_python(root, f"{PLUGIN}/*.py"),
        *_python(root, f"{PLUGIN}/compat_configs/__init__.py"),
        *_python(root, "common/rules/*.py"),
    ]:
        for kind in _patches_in(path):
            add(path, kind)
    for path in _python(root, "compat_build/patches/*.py"):
        if path.name != "__init__.py":
            add(path, "build-patch")
    for path in _python(root, "cards/*/patches/**/*.py"):
        add(path, "build-patch")
    for path in _python(root, "common/shims/**/*.py"):
        add(path, "shim")
    for path in _python(root, "envs/*/*.py"):
        add(path, "harness")
    return out


def unlisted(entries: List[Entry], root: Path = ROOT) -> List[str]:
    """Each patch of the tree no entry of its kind names ("path (kind)"), and each file an entry
    names that is not in the tree."""
    listed = {(f, e.kind) for e in entries for f in e.files}
    problems = [f"{path} ({kind})" for path, kinds in sorted(found(root).items()) for kind in sorted(kinds) if (path, kind) not in listed]
    problems += [f"{f} (named by {e.name!r}, not in the tree)" for e in entries for f in e.files if not (root / f).is_file()]
    return problems


def main() -> int:
    entries = load()
    for entry in sorted(entries, key=lambda e: (KINDS.index(e.kind), e.name)):
        print(f"{entry.kind:<13} {entry.name:<30} {entry.changes}")
        print(f"{'':<13} {'':<30} applies: {entry.applies}; until: {entry.until}")
    problems = unlisted(entries)
    for problem in problems:
        print(f"not in the ledger: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
