"""Print what an installed engine supports, as JSON: run with the engine's own Python.

Used at image build time (the image's vLLM and transformers are the truth) and by `make profiles`
against the local engine venvs. Standard library plus whatever the engine has installed; a
package that is absent yields an empty list, never an invented one.
"""

import json
import sys
from importlib import metadata
from typing import Any, Dict, List


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def vllm_architectures() -> List[str]:
    try:
        from vllm.model_executor.models.registry import _VLLM_MODELS
    except Exception:  # no vLLM, or one that cannot import here: unknown, not empty
        return []
    return sorted(_VLLM_MODELS)


def _mapping_names(module: str) -> Dict[str, Any]:
    """The literal `*_MAPPING_NAMES` tables of a transformers auto module, read from its source.

    Importing modeling_auto needs torch on some versions (4.55 without torch raises), and its
    lazy mappings import every model class; the tables themselves are plain literals.
    """
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return {}
    with open(spec.origin, encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    tables: Dict[str, Any] = {}
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if not name.endswith("_MAPPING_NAMES"):
            continue
        value = node.value
        if isinstance(value, ast.Call) and value.args:  # OrderedDict([...])
            value = value.args[0]
        try:
            tables[name] = dict(ast.literal_eval(value))
        except (ValueError, TypeError):
            continue  # built by code (a conditional entry), not a literal: skip, never guess
    return tables


def transformers_tables() -> Dict[str, Any]:
    # The tokenizer table is built by code (entries depend on sentencepiece/tokenizers being
    # installed), so it is imported; tokenization_auto needs no torch.
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

    classes = {"PreTrainedTokenizerFast", "PreTrainedTokenizer"}
    model_types = set()
    for model_type, names in TOKENIZER_MAPPING_NAMES.items():
        model_types.add(model_type)
        for name in names if isinstance(names, (tuple, list)) else (names,):
            if name:
                classes.add(name)
    model_tables = _mapping_names("transformers.models.auto.modeling_auto")
    known = set()
    for table in model_tables.values():
        for v in table.values():
            known.update(v if isinstance(v, (tuple, list)) else (v,))
    causal = model_tables.get("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", {})
    return {
        "tokenizer_classes": sorted(classes),
        "tokenizer_model_types": sorted(model_types),
        "model_type_architectures": {k: v for k, v in sorted(causal.items()) if isinstance(v, str)},
        "transformers_architectures": sorted(known),
    }


def engine_args(vllm_source: str = "") -> List[str]:
    """Field names of vLLM's EngineArgs (each is a `vllm serve --flag`), read from arg_utils.py's
    source: the installed vLLM's, or the one under `vllm_source` (an upstream source tree of the
    card's era when no build of its fork exists here). Empty when neither is there."""
    import ast
    import importlib.util
    import os

    if vllm_source:
        path = os.path.join(vllm_source, "vllm", "engine", "arg_utils.py")
    else:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return []
        path = os.path.join(list(spec.submodule_search_locations)[0], "engine", "arg_utils.py")
    try:
        with open(path, encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except OSError:
        return []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "EngineArgs":
            return sorted(n.target.id for n in node.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))
    return []


def snapshot(vllm_source: str = "") -> Dict[str, Any]:
    data: Dict[str, Any] = {
        "vllm_version": _version("vllm"),
        "transformers_version": _version("transformers"),
        "architectures": vllm_architectures(),
        "engine_args": engine_args(vllm_source),
    }
    data.update(transformers_tables())
    return data


if __name__ == "__main__":
    # vLLM logs to stdout on import, so the JSON goes to a file named on the command line.
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: snapshot_engine.py OUT.json [VLLM_SOURCE_TREE]")
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(snapshot(sys.argv[2] if len(sys.argv) == 3 else ""), out, indent=1, sort_keys=True)
        out.write("\n")
