"""One way to change an installed library's source: locate, anchor, back up once, apply, verify.

Used by the image build (library bugs, L1..) and at container start (H1's kernel head-size
list). A patch is a function from the file's text to the new text; it raises AnchorMissing when
the code it expects is not there, and returns the text unchanged when it is already applied, so
applying twice changes nothing. The result must compile before it replaces the file; the first
change keeps the original next to it (`<file>.enginex-orig`).

Standard library only: this module is copied into images before the rest of the package.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Callable, Optional

BACKUP_SUFFIX = ".enginex-orig"


class PatchError(Exception):
    """A patch could not be applied; the message names the file and what was missing."""


class AnchorMissing(PatchError):
    """The code a patch expects is not in the file (another version of the library)."""


class PatchResult:
    __slots__ = ("path", "status", "backup")

    def __init__(self, path: str, status: str, backup: Optional[str] = None) -> None:
        self.path, self.status, self.backup = path, status, backup

    def __repr__(self) -> str:
        return f"PatchResult({self.path!r}, {self.status!r})"


def package_dir(top: str) -> Optional[str]:
    """Directory of top-level package `top` for this interpreter, found without importing it
    (importing vLLM or a vendor package to find a file would run their start-up code)."""
    import importlib.util  # only the starts that look for a package pay for it

    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def module_location(dotted: str) -> Optional[str]:
    """Where module `dotted` lives for this Python, without importing it: a package's directory,
    or a module's file (source or extension); None when it is not there."""
    import importlib.machinery

    top, *rest = dotted.split(".")
    base = package_dir(top)
    if base is None:
        return None
    path = os.path.join(base, *rest)
    if os.path.isfile(os.path.join(path, "__init__.py")) or not rest:
        return path
    for suffix in [".py"] + list(importlib.machinery.EXTENSION_SUFFIXES):
        if os.path.isfile(path + suffix):
            return path + suffix
    return None


def module_file(dotted: str) -> str:
    """The source file of module `dotted` (a submodule of an installed package) for this Python."""
    location = module_location(dotted)
    if location is None and package_dir(dotted.split(".")[0]) is None:
        raise PatchError(f"package {dotted.split('.')[0]!r} is not installed for this Python")
    if location is not None and os.path.isdir(location):
        location = os.path.join(location, "__init__.py")
    if location is None or not location.endswith(".py") or not os.path.isfile(location):
        raise PatchError(f"module {dotted!r} has no source file for this Python")
    return location


def patch_file(path: str, transform: Callable[[str], str], write: bool = True) -> PatchResult:
    """Apply `transform` to the file at `path`. Status: "applied" or "unchanged" ("would apply"
    when `write` is False: every check runs, nothing is written).
    Raises AnchorMissing or PatchError (unreadable, unwritable, result does not compile)."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PatchError(f"{path}: cannot be read ({exc})") from None
    try:
        new = transform(text)
    except AnchorMissing as exc:
        raise AnchorMissing(f"{path}: anchor missing: {exc}") from None
    except SyntaxError as exc:
        raise PatchError(f"{path}: not valid Python ({exc.msg}, line {exc.lineno})") from None
    if new == text:
        return PatchResult(path, "unchanged")
    try:
        compile(new, path, "exec")
    except SyntaxError as exc:
        raise PatchError(f"{path}: patched source does not compile ({exc.msg}, line {exc.lineno})") from None
    if not write:
        return PatchResult(path, "would apply")
    import shutil  # only a start that patches pays for it

    backup = path + BACKUP_SUFFIX
    tmp = f"{path}.enginex-tmp{os.getpid()}"
    try:
        if not os.path.exists(backup):
            shutil.copy2(path, backup)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(new)
        shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise PatchError(f"{path}: cannot be written ({exc.strerror or exc})") from None
    return PatchResult(path, "applied", backup)


def is_docstring(stmt) -> bool:
    """Whether a statement of a function body is its docstring (or another bare constant)."""
    import ast

    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


def function_span(text: str, name: str, cls: Optional[str] = None):
    """(node, lines) of the first function `name` (inside class `cls` when given), or raise
    AnchorMissing. Anchoring on the syntax tree survives reformatting and moved code."""
    import ast  # only patches pay for it

    tree = ast.parse(text)
    scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls] if cls else [tree]
    for scope in scopes:
        for node in ast.walk(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node, text.splitlines(keepends=True)
    where = f"{cls}.{name}" if cls else name
    raise AnchorMissing(f"function {where} not found")
