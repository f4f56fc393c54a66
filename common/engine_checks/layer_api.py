"""What an engine's vLLM defines, read from its source: the layer API backports (R10) call.

A symbol is "file under vllm/:Class[.method]" or "file:function"; its answer is the parameter
names it takes (a class: its own __init__'s, [] when it defines none). Read from the syntax
tree, never imported: importing the layers needs torch, and on a vendor fork its device
libraries. Standalone (standard library only): the engine-side checks (process.py) and the
profile snapshot at image build (compat_build/snapshot_engine.py) load this file by path.
"""

import ast
import os
from typing import Any, Dict, Iterable, List, Optional


def _params(node: Any) -> List[str]:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    return [n for n in names if n not in ("self", "cls")]


def _find(tree: Optional[ast.Module], dotted: str) -> Optional[List[str]]:
    body = tree.body if tree is not None else []
    node = None
    for part in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if node is None:
            return None
        body = node.body if isinstance(node, ast.ClassDef) else []
    if isinstance(node, ast.ClassDef):
        init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        return _params(init) if init is not None else []
    return _params(node)


def probe(vllm_dir: str, symbols: Iterable[str]) -> Dict[str, List[str]]:
    """symbol -> its parameter names, for each symbol defined where it says; absent ones left out."""
    trees: Dict[str, Optional[ast.Module]] = {}
    found: Dict[str, List[str]] = {}
    for symbol in symbols:
        path, _, dotted = symbol.partition(":")
        if path not in trees:
            try:
                with open(os.path.join(vllm_dir, *path.split("/")), encoding="utf-8") as fh:
                    trees[path] = ast.parse(fh.read())
            except (OSError, SyntaxError, ValueError):
                trees[path] = None
        params = _find(trees[path], dotted)
        if params is not None:
            found[symbol] = params
    return found


def vllm_dir() -> str:
    """The installed vLLM package's directory for this interpreter ("" without one); nothing imported."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return list(spec.submodule_search_locations)[0]
