"""How every harness patch of an engine venv edits the engine's installed source (envs/<venv>/cpu_*.py).

An edit is (file under the package, anchor, replacement). An edit already made is left as it is;
an anchor not found exactly once stops everything before a file is written (another engine than
the one the edit was written for). Each file is replaced, never written in place: a venv copied
with hard links keeps its original intact. Standard library only: it runs under each engine
venv's Python while the venv is built (make-venv.sh keys every venv by this file too).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence, Tuple

Edit = Tuple[str, str, str]


def apply_edits(root: Path, edits: Sequence[Edit], engine: str) -> List[str]:
    """Make `edits` to the package at `root`; what was done, per edit. Raises ValueError, before
    any file is written, when an anchor is not found exactly once (`engine`: the vLLM the edits
    were written for, named in the error)."""
    texts: Dict[str, str] = {}
    done = []
    for rel, old, new in edits:
        text = texts.setdefault(rel, (root / rel).read_text())
        if text.count(new) == 1 and old not in text.replace(new, ""):
            done.append(f"{rel} already edited")
            continue
        if text.count(old) != 1:
            raise ValueError(
                f"anchor not found exactly once in {root / rel}; this is not the vLLM {engine} the edit was written for:\n{old}"
            )
        texts[rel] = text.replace(old, new)
        done.append(f"{rel} edited")
    for rel, text in texts.items():
        replace_file(root / rel, text)
    return done


def replace_file(path: Path, text: str) -> None:
    """Write `path` as a new file (its mode kept) and move it into place."""
    tmp = path.with_name(path.name + ".enginex-tmp")
    tmp.write_text(text)
    if path.exists():
        shutil.copymode(path, tmp)
    os.replace(tmp, path)


def run(label: str, apply: Callable[[Path], object]) -> int:
    """A harness patch's main: `apply` to this Python's vLLM package, each line of what it did
    printed under `label`; an exit naming the anchor when the engine is not the one expected."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{label}: no vllm in this Python")
    try:
        done = apply(Path(list(spec.submodule_search_locations)[0]))
    except ValueError as exc:
        sys.exit(f"{label}: {exc}")
    for line in [done] if isinstance(done, str) else done:
        print(f"{label}: {line}")
    return 0
