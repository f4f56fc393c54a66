"""Which configuration fields each architecture's model code reads, from the source itself.

doctor promises `tokens: proven` only where every configuration value that the engine's model
code (and the author's, whose function the engine must compute) reads for the model's
architecture was exercised by an exact conformance cell (common/engine/conformance_cells.py). Which
fields those are is read here from the code, never listed by hand: the engine's model module of
each registered architecture (vLLM's registry maps it to a module and class) and the model modules
it imports, the image's backport of that architecture where the plugin registers one (with the engine's model
modules it builds on: the V1 Qwen3.5 backport's Qwen3-Next layers), and the
author's transformers modeling file that defines the class. A field is read where the code says
`config.NAME`, `self.config.NAME`, `hf_config.NAME`, `text_config.NAME` (and the like),
`getattr(config, "NAME", ...)`, or a getter called the same way (`_get(config, "NAME", ...)`).

The sources are read as text (ast), never imported: the engine venvs' vLLM, the author venv's
transformers, and common/vllm_plugin. Output: common/engine/model_fields.json, per engine generation
and architecture, the sorted union of the fields its engine, backport and author read.

usage: python -m compat_build.model_fields [--check]
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import sys
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "common" / "engine" / "model_fields.json"
BACKPORTS = ROOT / "common" / "vllm_plugin" / "compat_backports"
# The engine generations and the venv each is read from (conformance/cases.py runs the same).
ENGINE_VENVS = {"0.5.5": ".venv-engine055", "0.11.0": ".venv-engine", "0.32.0": ".venv-engine-next"}
AUTHOR_VENV = ".venv-author"
MODELS_PACKAGE = "vllm.model_executor.models"
# Sibling modules of the models package that hold no model code of their own (wrappers that turn
# any model into a pooling one, interfaces, helpers, the registry, vision towers).
GENERIC_SIBLINGS = frozenset(("adapters", "interfaces", "interfaces_base", "utils", "registry", "__init__", "module_mapping", "vision"))
# Names a model file gives the model's configuration (or its language model's).
CONFIG_NAMES = frozenset(("config", "hf_config", "text_config", "hf_text_config", "model_config_hf", "lm_config", "llm_config"))
# Attributes of a config that are no field of config.json: methods and transformers' own state.
NOT_FIELDS = frozenset(
    (
        "get_text_config",
        "to_dict",
        "to_json_string",
        "get",
        "update",
        "keys",
        "items",
        "text_config",
        "vision_config",
        "audio_config",
        "hf_config",
        "hf_text_config",
        "_attn_implementation",
        "_attn_implementation_internal",
        "__class__",
        "__dict__",
        "name_or_path",
        "_name_or_path",
        "architectures",
        "model_type",
    )
)


def site_packages(venv: Path) -> Optional[Path]:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    return found[0] if found else None


def _config_chain(node: ast.AST) -> bool:
    """Whether `node` names a configuration: config, self.config, x.hf_config, config.text_config."""
    if isinstance(node, ast.Name):
        return node.id in CONFIG_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in CONFIG_NAMES
    return False


@functools.cache
def file_fields(path: Path) -> FrozenSet[str]:
    return frozenset(fields_read(path.read_text(encoding="utf-8", errors="replace")))


def _called(node: ast.Call) -> str:
    """The name a call calls: `f` of f(...) and of obj.f(...), "" for anything else."""
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_getter(node: ast.Call) -> bool:
    """getattr(config, "NAME"), hasattr, and a getter called the same way (the Gemma 4
    backport's _get(config, "global_head_dim", default)): the configuration first, a name second.
    A constructor taken the same way (BaiChuan's `(config, "ROPE")`) reads no field."""
    name = _called(node)
    return (
        ("get" in name.lower() or name == "hasattr")
        and len(node.args) >= 2
        and _config_chain(node.args[0])
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and node.args[1].value.isidentifier()
    )


def fields_read(source: str) -> Set[str]:
    """The configuration fields a module's code reads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _config_chain(node.value):
            found.add(node.attr)
        elif isinstance(node, ast.Call) and _is_getter(node):
            found.add(node.args[1].value)
    return {f for f in found if f not in NOT_FIELDS and not f.startswith("__")}


def _imported_siblings(source: str, package: str, here: str = "") -> List[str]:
    """Modules of the same models package that `source` imports from (relative or absolute), as
    paths in the package ("qwen3", "layers/windows"); `here` is the importing module's folder in
    it ("" at its top, "layers" for the backports' shared layers)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level >= 1:
            folder = here.split("/") if here else []
            if node.level - 1 > len(folder):
                continue  # above the package
            parts = folder[: len(folder) - (node.level - 1)] + (node.module.split(".") if node.module else [])
        elif node.module and node.module.startswith(package + "."):
            parts = node.module[len(package) + 1 :].split(".")
        else:
            continue
        # The module itself, and each name it imports that may be a module of its own
        # (`from .layers import gated_delta`); a name that is no file is skipped by the caller.
        out.extend("/".join(p) for p in [parts] + [parts + [alias.name] for alias in node.names] if p)
    return out


@functools.cache
def _module(path: Path, package: str, here: str = "") -> Tuple[FrozenSet[str], Tuple[str, ...]]:
    """(fields read, sibling modules imported) of one file, parsed once."""
    source = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(fields_read(source)), tuple(_imported_siblings(source, package, here))


def module_fields(directory: Path, module: str, package: str, seen: Optional[Set[str]] = None) -> Set[str]:
    """Fields read by `module` of `directory` and by the sibling modules it imports."""
    seen = set() if seen is None else seen
    if module in seen:
        return set()
    seen.add(module)
    path = directory / f"{module}.py"
    if not path.is_file():
        return set()
    fields, siblings = _module(path, package, module.rpartition("/")[0])
    found = set(fields)
    for sibling in siblings:
        if sibling not in GENERIC_SIBLINGS:
            found |= module_fields(directory, sibling, package, seen)
    return found


def engine_models_imported(directory: Path, module: str, package: str, engine_package: str) -> Set[str]:
    """The engine's model modules (`engine_package`.X) that `module` of `directory` and the sibling
    modules it imports build on: a V1 backport made of the engine's own classes (Ministral 3's on
    its Llama) reads what they read."""
    found: Set[str] = set()
    todo, seen = [module], set()
    while todo:
        name = todo.pop()
        path = directory / f"{name}.py"
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        source = path.read_text(encoding="utf-8", errors="replace")
        todo.extend(_module(path, package, name.rpartition("/")[0])[1])
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(engine_package + "."):
                found.add(node.module[len(engine_package) + 1 :].replace(".", "/"))  # type: ignore[index]
    return found - GENERIC_SIBLINGS  # the engine's helpers, read by every model: no model's fields


def registry(models: Path) -> Dict[str, str]:
    """architecture -> module of vLLM's model registry (0.5.5's models/__init__.py, later
    registry.py): the dicts of `"Arch": ("module", "Class")`."""
    out: Dict[str, str] = {}
    for name in ("__init__.py", "registry.py"):
        path = models / name
        if not path.is_file():
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and isinstance(value, ast.Tuple)
                    and len(value.elts) >= 2
                    and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts[:2])
                ):
                    out.setdefault(key.value, value.elts[0].value)  # type: ignore[union-attr]
    return out


def class_index(files: Iterable[Path]) -> Dict[str, Path]:
    """class name -> the file that defines it (first found)."""
    out: Dict[str, Path] = {}
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            if line.startswith("class "):
                name = line[6:].split("(", 1)[0].split(":", 1)[0].strip()
                out.setdefault(name, path)
    return out


def backport_modules() -> Dict[str, Dict[str, str]]:
    """vLLM version -> architecture -> the module of the image's backport that fits that engine
    (the layer API of its cards' profiles, as R10 picks it), its own class replaced or not."""
    sys.path.insert(0, str(ROOT))
    try:
        from common.engine.profile import Profile
        from common.vllm_plugin.compat_backports import BACKPORTS, fitting
    finally:
        sys.path.pop(0)
    out: Dict[str, Dict[str, str]] = {}
    for path in sorted((ROOT / "common" / "engine" / "profiles").glob("*.json")):
        profile = Profile.from_json(json.loads(path.read_text(encoding="utf-8")))
        table = out.setdefault(profile.vllm_version, {})
        for arch in BACKPORTS:
            backport, missing = fitting(arch, profile.layer_api)
            if backport is not None and missing == []:
                table.setdefault(arch, backport.module)
    return out


def author_fields(author: Path, architectures: Iterable[str]) -> Dict[str, Set[str]]:
    """architecture class -> fields its author's modeling file reads (transformers 5)."""
    models = author / "transformers" / "models"
    index = class_index(sorted(models.glob("*/modeling_*.py")))
    return {name: set(file_fields(index[name])) for name in architectures if name in index}


def engine_fields(engine: Path, architectures: Iterable[str]) -> Dict[str, Set[str]]:
    models = engine / "vllm" / "model_executor" / "models"
    table = registry(models)
    out: Dict[str, Set[str]] = {}
    for arch in architectures:
        module = table.get(arch)
        if module:
            out[arch] = module_fields(models, module, MODELS_PACKAGE)
    return out


def generate(root: Path = ROOT) -> Dict[str, Dict[str, List[str]]]:
    """The table for every engine generation whose venv is built here."""
    author_site = site_packages(root / AUTHOR_VENV)
    if author_site is None:
        raise SystemExit(f"model_fields: no {AUTHOR_VENV}; `make author-env` builds it")
    fitting_backports = backport_modules()
    backports = {arch: module for table in fitting_backports.values() for arch, module in table.items()}
    registries = {}
    for vllm, venv in ENGINE_VENVS.items():
        site = site_packages(root / venv)
        if site is None:
            raise SystemExit(f"model_fields: no {venv}; `make envs` builds it")
        registries[vllm] = (site, registry(site / "vllm" / "model_executor" / "models"))
    author = author_fields(author_site, set(backports).union(*(set(r) for _, r in registries.values())))
    out: Dict[str, Dict[str, List[str]]] = {}
    for vllm, (site, registered) in registries.items():
        fitting = fitting_backports.get(vllm, {})
        archs = sorted(set(registered) | set(fitting))
        engine = engine_fields(site, archs)
        table: Dict[str, List[str]] = {}
        for arch in archs:
            fields = set(engine.get(arch, set())) | author.get(arch, set())
            if arch in fitting:  # the backport's reads count where R10 registers it, over the engine's class too
                fields |= module_fields(BACKPORTS, fitting[arch], "common.vllm_plugin.compat_backports")
                models = site / "vllm" / "model_executor" / "models"
                for used in sorted(engine_models_imported(BACKPORTS, fitting[arch], "common.vllm_plugin.compat_backports", MODELS_PACKAGE)):
                    fields |= module_fields(models, used, MODELS_PACKAGE)
            if fields:
                table[arch] = sorted(fields)
        out[vllm] = table
    return out


def render(table: Dict[str, Dict[str, List[str]]]) -> str:
    return json.dumps({"source": "python -m compat_build.model_fields (make profiles)", "engines": table}, indent=1, sort_keys=True) + "\n"


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_build.model_fields")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs from the sources")
    opts = parser.parse_args(argv)
    text = render(generate())
    if opts.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"model_fields: {OUT.relative_to(ROOT)} is stale; run `python -m compat_build.model_fields`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"model_fields: wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
