"""Work-dir directories that stand in for the model: symlinks into it plus rewritten metadata.

The model directory is never written: names of it appear here as symlinks (weights are linked,
never opened or copied), except the metadata files a repair rewrote, which are written as new
JSON. A tokenizer overlay (`--tokenizer`) links only the files a tokenizer is read from; a model
view (common/start/model_view.py) links every entry, since the engine serves it as the model.
"""

from __future__ import annotations


import json
import os

from ..model.modeldir import ModelDir

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

# What transformers' AutoTokenizer reads: tokenizer files, the configs that name the class or the
# model type, chat templates, and vocabularies in their several formats. Weights never.
TOKENIZER_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken", ".vocab", ".spm", ".bpe")
# A model directory with more entries than this is not linked entry by entry: each start would
# spend its time writing symlinks (a million files took 33 s and 416 MB).
MAX_LINKS = 10000


def tokenizer_file(name: str) -> bool:
    """Whether a top-level name of the model is something a tokenizer load may read."""
    return name.endswith(TOKENIZER_SUFFIXES) and not name.endswith(".safetensors.index.json")


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


def build_overlay(
    model: ModelDir, dest: str, edits: Dict[str, List[Dict[str, Any]]], keep: Optional[Callable[[str], bool]] = None
) -> List[str]:
    """Create `dest` with the model's names linked (those `keep` accepts, when given) and
    `edits` applied; returns the rewritten names. Raises OSError when it cannot be written or
    the model has more than MAX_LINKS entries to link."""
    names = [n for n in model.names() if n not in edits and (keep is None or keep(n))]
    if len(names) > MAX_LINKS:
        raise OSError(0, f"the model directory has {len(names)} entries to link, over {MAX_LINKS}")
    os.makedirs(dest)
    for name in names:
        os.symlink(os.path.join(model.path, name), os.path.join(dest, name))
    for name, file_edits in sorted(edits.items()):
        patched = patch_json(model.json_object(name), file_edits)
        with open(os.path.join(dest, name), "w", encoding="utf-8") as fh:
            json.dump(patched, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
    return sorted(edits)
