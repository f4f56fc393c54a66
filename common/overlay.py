"""The repair overlay: a fresh directory of symlinks into the model plus rewritten metadata.

The model directory is never written: every name of it appears in the overlay as a symlink (the
engine reads tokenizer files through it; weights are linked, never opened or copied), except the
metadata files a repair rewrote, which are written as new JSON.
"""

from __future__ import annotations


import json
import os

from .modeldir import ModelDir

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List


def patch_json(base: Dict[str, Any], edits: List[Dict[str, Any]]) -> Dict[str, Any]:
    """`base` with each edit laid on in order: a key set to None is removed."""
    out = dict(base)
    for edit in edits:
        for key, value in edit.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
    return out


def build_overlay(model: ModelDir, dest: str, edits: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Create `dest` with the model's names linked and `edits` applied; returns rewritten names."""
    os.makedirs(dest)
    for name in model.names():
        if name not in edits:
            os.symlink(os.path.join(model.path, name), os.path.join(dest, name))
    for name, file_edits in sorted(edits.items()):
        patched = patch_json(model.json_object(name), file_edits)
        with open(os.path.join(dest, name), "w", encoding="utf-8") as fh:
            json.dump(patched, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    return sorted(edits)
