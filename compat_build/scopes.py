"""The generated scopes of common/rules/support/scopes.py, each rewritten in place from its source.

- R10_ARCHITECTURES: the architectures the runtime package ships a backport of, read from the
  backports' table (common/vllm_plugin/compat_backports: BACKPORTS), here.
- C1_ARCHITECTURES: the architectures a conformance cell speaks for, per card, from the cells
  (conformance/report.py: write_scope, run by `python -m conformance judge` and `run`).

The preflight reads the scopes from scopes.py alone: a clean start never imports the plugin's
table or the cells. Nothing is pasted by hand, and the rest of the file stays byte for byte.

usage: python -m compat_build.scopes [--check]   (exit 1 with --check when a scope is stale)
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Any, Optional, Sequence, Tuple

SCOPES = Path(__file__).resolve().parents[1] / "common" / "rules" / "support" / "scopes.py"
INDENT = "    "


def r10_architectures() -> Tuple[str, ...]:
    """Every architecture with a backport in any engine generation, sorted."""
    from common.vllm_plugin.compat_backports import BACKPORTS

    return tuple(sorted(BACKPORTS))


def _literal(value: Any, depth: int = 0) -> str:
    """The scope as the file writes it: one member a line, tuples of sorted strings."""
    inner = INDENT * (depth + 1)
    if isinstance(value, dict):
        body = "".join(f'{inner}"{key}": {_literal(item, depth + 1)},\n' for key, item in value.items())
        return "{\n" + body + INDENT * depth + "}"
    body = "".join(f'{inner}"{item}",\n' for item in sorted(value))
    return "(\n" + body + INDENT * depth + ")"


def _node(text: str, name: str) -> Any:
    for node in ast.parse(text).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            return node
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [name]:
            return node
    raise KeyError(f"no module-level {name} to rewrite")


def is_current(name: str, value: Any, path: Optional[Path] = None) -> bool:
    """Whether scopes.py's `name` already is `value`, written as this module writes it."""
    text = (path or SCOPES).read_text(encoding="utf-8")
    return ast.get_source_segment(text, _node(text, name).value) == _literal(value)


def rewrite(name: str, value: Any, path: Optional[Path] = None) -> bool:
    """Writes `value` as the module-level `name` of scopes.py (its annotation and the comments around
    it kept); True when the scope changed, False (the file untouched) when it already was `value`."""
    path = path or SCOPES
    if is_current(name, value, path):
        return False
    text = path.read_text(encoding="utf-8")
    value_node = _node(text, name).value
    lines = text.splitlines(keepends=True)
    start, end = value_node.lineno - 1, value_node.end_lineno - 1
    head, tail = lines[start][: value_node.col_offset], lines[end][value_node.end_col_offset :]
    lines[start : end + 1] = [head + _literal(value) + tail]
    path.write_text("".join(lines), encoding="utf-8")
    return True


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_build.scopes", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 where R10's scope is not the backports' table; write nothing")
    opts = parser.parse_args(argv)
    want = r10_architectures()
    if opts.check:
        if is_current("R10_ARCHITECTURES", want):
            return 0
        print("scopes: R10_ARCHITECTURES is not the backports' table: run python -m compat_build.scopes", file=sys.stderr)
        return 1
    changed = rewrite("R10_ARCHITECTURES", want)
    print(f"scopes: R10_ARCHITECTURES, {len(want)} architectures{'' if changed else ' (unchanged)'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
