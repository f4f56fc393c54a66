"""Print what an installed engine supports, as JSON: run with the engine's own Python.

Used at image build time (the image's vLLM and transformers are the truth) and by `make profiles`
against the local engine venvs. Standard library plus whatever the engine has installed; a
package that is absent yields an empty list, never an invented one.
"""

import gc
import json
import os
import sys
from importlib import metadata
from typing import Any, Dict, List, Optional


def _dist_version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def vllm_architectures() -> List[str]:
    """What the engine's model registry serves: the public `get_supported_archs()` (it also sees
    what plugins register, as vendor forks do), else the private table of older versions."""
    try:
        from vllm import ModelRegistry
    except Exception:  # no vLLM, or one that cannot import here: unknown, not empty
        return []
    try:
        return sorted(ModelRegistry.get_supported_archs())
    except Exception:
        pass
    try:
        from vllm.model_executor.models.registry import _VLLM_MODELS
    except Exception:
        return []
    return sorted(_VLLM_MODELS)


def transformers_backend() -> Optional[bool]:
    """Whether the engine's vLLM serves architectures it lacks through transformers' own classes
    (vLLM >= 0.6: `--model-impl transformers`, and by itself for unregistered classes); None when
    no vLLM can be asked."""
    try:
        from vllm import ModelRegistry
    except Exception:
        return None
    return hasattr(ModelRegistry, "_try_resolve_transformers")


def backend_compatible_architectures() -> List[str]:
    """transformers model classes whose `is_backend_compatible()` is True (the attribute
    `_supports_attention_backend`, set on a class or inherited from one): the only ones vLLM's
    Transformers backend takes. Read from the modeling sources: importing them needs torch and
    minutes."""
    import ast
    import glob
    import importlib.util
    import os

    spec = importlib.util.find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return []
    root = list(spec.submodule_search_locations)[0]
    bases: Dict[str, List[str]] = {}
    flags: Dict[str, bool] = {}
    for path in glob.glob(os.path.join(root, "models", "*", "modeling_*.py")):
        try:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases.setdefault(node.name, [b.id for b in node.bases if isinstance(b, ast.Name)])
            for stmt in node.body:
                if (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "_supports_attention_backend" for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant)
                ):
                    flags[node.name] = bool(stmt.value.value)

    def compatible(name: str, seen: frozenset = frozenset()) -> bool:
        if name in flags:
            return flags[name]
        return any(compatible(b, seen | {name}) for b in bases.get(name, []) if b not in seen)

    return sorted(name for name in bases if compatible(name))


def quantization_methods() -> List[str]:
    """The `quant_method` names the engine's vLLM can load (empty: no vLLM to ask)."""
    try:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS
    except Exception:
        return []
    return sorted(QUANTIZATION_METHODS)


def head_dim_none_fallback() -> Optional[bool]:
    """Whether the engine's head-size computation falls back to hidden/heads when the config
    holds `head_dim = None` (0.11 does; 0.5.5 returns the None and fails later). Asked of the
    engine's own method with a stand-in config (ModelConfig.get_head_size, or from vLLM ~0.2x on
    the arch-config convertor it delegates to); None when it cannot be asked."""
    from types import SimpleNamespace

    text = SimpleNamespace(model_type="llama", head_dim=None, hidden_size=64, num_attention_heads=4)
    stand_in = SimpleNamespace(hf_text_config=text, hf_config=text, is_deepseek_mla=False, use_mla=False, is_attention_free=False)
    try:
        import vllm.config  # noqa: F401 - the convertor module only imports after it (circular imports)
        from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase as Convertor

        method = Convertor.get_head_size
        stand_in = SimpleNamespace(
            hf_text_config=text, is_deepseek_mla=lambda: False, get_hidden_size=lambda: 64, get_total_num_attention_heads=lambda: 4
        )
    except Exception:
        try:
            from vllm.config import ModelConfig

            method = ModelConfig.get_head_size
        except Exception:
            return None
    try:
        return method(stand_in) == 16
    except Exception:
        return None


def null_head_dim_model_types() -> List[str]:
    """model_types whose config class of this transformers sets `head_dim` to None when
    config.json has none (MixtralConfig in 4.55): an engine that reads head_dim without a
    fallback then fails. Asked of each config class itself; classes that cannot be built with
    their defaults are left out (unknown, never guessed)."""
    try:
        from transformers import CONFIG_MAPPING
    except Exception:
        return []
    import warnings

    found = []
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = CONFIG_MAPPING[model_type]()
        except Exception:
            continue
        try:
            candidates = (config, getattr(config, "text_config", None))
            if any(c is not None and hasattr(c, "head_dim") and c.head_dim is None for c in candidates):
                found.append(model_type)
        except Exception:  # transformers 5: a per-layer head_dim refuses global access; not None
            continue
    return sorted(found)


def config_attribute_maps() -> Dict[str, Dict[str, str]]:
    """model_type -> its config class's `attribute_map` (a name the class also answers to -> the
    key it stores), where the class has one: which of transformers 5's renamed keys (num_experts
    -> num_local_experts) this transformers reads. Class attributes, nothing instantiated."""
    try:
        from transformers import CONFIG_MAPPING
    except Exception:
        return {}
    found = {}
    for model_type in list(CONFIG_MAPPING.keys()):
        try:
            mapping = getattr(CONFIG_MAPPING[model_type], "attribute_map", None)
        except Exception:  # a config module that cannot import here
            continue
        if isinstance(mapping, dict) and mapping:
            found[model_type] = {str(k): str(v) for k, v in sorted(mapping.items())}
    return found


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


def _loadable_tokenizer_classes(known: set) -> set:
    """Class names AutoTokenizer resolves beyond its mapping table (transformers 5 drops the
    `...Fast` entries of the table but still resolves those names through aliases): each
    candidate is asked of transformers' own `tokenizer_class_from_name`."""
    try:
        import transformers
        from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
    except Exception:
        return set()
    candidates = set(known) | {n[:-4] for n in known if n.endswith("Fast")} | {n + "Fast" for n in known}
    candidates |= {n for n in dir(transformers) if n.endswith(("Tokenizer", "TokenizerFast"))}
    found = set()
    for name in sorted(candidates):
        try:
            if tokenizer_class_from_name(name) is not None:
                found.add(name)
        except Exception:  # a class whose backend (sentencepiece, tiktoken) is missing here
            continue
    return found


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
    classes |= _loadable_tokenizer_classes(classes)
    model_tables = _mapping_names("transformers.models.auto.modeling_auto")
    known = set()
    for table in model_tables.values():
        for v in table.values():
            known.update(v if isinstance(v, (tuple, list)) else (v,))
    causal = model_tables.get("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", {})
    try:  # the lazy mapping of every model_type this transformers reads (no torch needed)
        from transformers import CONFIG_MAPPING

        config_types = list(CONFIG_MAPPING.keys())
    except Exception:
        config_types = list(_mapping_names("transformers.models.auto.configuration_auto").get("CONFIG_MAPPING_NAMES", {}))
    return {
        "config_model_types": sorted(config_types),
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


def serve_config_file() -> Optional[bool]:
    """Whether `vllm serve --config FILE.yaml` is read (vLLM 0.11's FlexibleArgumentParser loads
    it; 0.5.5 has no such flag). None: no vLLM to ask."""
    parser = None
    for module in ("vllm.utils.argparse_utils", "vllm.utils"):  # where newer and older vLLM keep it
        try:
            parser = __import__(module, fromlist=["FlexibleArgumentParser"]).FlexibleArgumentParser
            break
        except Exception:
            continue
    if parser is None:
        return None
    return callable(getattr(parser, "load_config_file", None))


def reads_transformers5_format() -> Dict[str, Optional[bool]]:
    """What the engine's transformers makes of the files transformers 5 writes, asked of its own
    classes: `rope_parameters` (a config class taking it as a parameter; 4.x sets an unknown
    key as an inert attribute), the `dtype` key (read back as torch_dtype from 4.56 on), and a
    list of `extra_special_tokens` (4.x calls .keys() on it), a nested processor_config.json
    (nested_processor_config_read). None: could not be asked."""
    facts: Dict[str, Optional[bool]] = {"rope_parameters": None, "dtype": None, "extra_special_tokens_list": None}
    facts["nested_processor_config"] = nested_processor_config_read()
    try:
        import inspect

        from transformers import LlamaConfig
    except Exception:
        return facts
    facts["rope_parameters"] = "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read = LlamaConfig.from_dict({"dtype": "bfloat16"})
            facts["dtype"] = "bfloat16" in str(getattr(read, "torch_dtype", None))
    except Exception:
        pass
    try:
        from tokenizers import Tokenizer, models
        from transformers import PreTrainedTokenizerFast

        backend = Tokenizer(models.WordLevel({"<unk>": 0, "<x>": 1}, unk_token="<unk>"))
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, extra_special_tokens=["<x>"])
        facts["extra_special_tokens_list"] = tok.convert_tokens_to_ids("<x>") == 1
    except AttributeError:  # 'list' object has no attribute 'keys'
        facts["extra_special_tokens_list"] = False
    except Exception:
        pass
    return facts


def nested_processor_config_read() -> Optional[bool]:
    """Whether the engine's transformers, asked for an image processor's settings where only a
    nested processor_config.json (transformers 5's form) exists, reads its `image_processor`
    entry (4.57 and 5.x) or fails for want of preprocessor_config.json (4.55: OSError). Asked of
    the class every image processor loads its settings through; no imaging library is needed."""
    import tempfile

    try:
        from transformers.image_processing_base import ImageProcessingMixin
    except Exception:
        return None
    marker = {"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 7}}
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "processor_config.json"), "w", encoding="utf-8") as fh:
            json.dump({"image_processor": marker, "processor_class": "LlavaProcessor"}, fh)
        try:
            settings, _ = ImageProcessingMixin.get_image_processor_dict(tmp)
        except OSError:  # "does not appear to have a file named preprocessor_config.json"
            return False
        except Exception:
            return None
    return isinstance(settings, dict) and settings.get("size") == marker["size"]


# What transformers' AutoConfig raises when it will not read a config.json without the model's
# own code, or does not know its model type: the engine did not read that config itself.
CONFIG_REFUSALS = (
    "trust_remote_code",
    "contains custom code",
    "requires you to execute the configuration file",
    "does not recognize this architecture",
    "Unrecognized model",
)


def own_config_classes() -> Optional[Dict[str, str]]:
    """model_type -> the engine's own config class, for each model type whose config.json the
    engine reads itself, without the model's code, whatever its auto_map says (Falcon's original
    RefinedWeb: vLLM 0.11 reads it with its RWConfig; 0.5.5 asks transformers first, which
    refuses it). Asked of the engine's own get_config, once per model type of its config
    registry, with a stand-in config.json (that model_type and an auto_map naming code that does
    not exist) and no trust_remote_code: a type it reads is listed, and so is one whose own class
    it reaches and which then finds the stand-in too bare (transformers did not stop it); one
    that transformers refuses is not. None: no vLLM to ask, or no config registry in it."""
    import tempfile
    import warnings

    try:
        from vllm.transformers_utils import config as vllm_config
    except Exception:
        return None
    registry = getattr(vllm_config, "_CONFIG_REGISTRY", None)
    if not isinstance(registry, dict):
        return None
    found: Dict[str, str] = {}
    for model_type in sorted(k for k in registry if isinstance(k, str)):
        value = dict.get(registry, model_type)  # vLLM 0.11's lazy table holds class names
        name = value if isinstance(value, str) else getattr(value, "__name__", str(value))
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "config.json"), "w", encoding="utf-8") as fh:
                json.dump({"model_type": model_type, "auto_map": {"AutoConfig": "configuration_probe.ProbeConfig"}}, fh)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    vllm_config.get_config(tmp, False)
            except Exception as exc:
                if any(marker in str(exc) for marker in CONFIG_REFUSALS):
                    continue
        found[model_type] = name
    return found


def _vllm_file(*parts: str) -> str:
    """The path of a file of the installed vLLM package ("" without one); nothing is imported."""
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.join(list(spec.submodule_search_locations)[0], *parts)


def general_plugins() -> Optional[bool]:
    """Whether the engine runs the `vllm.general_plugins` entry points (vllm/plugins: from 0.5.x
    on, in every process that builds an engine or a worker). Read from the source, as R8's plugin
    is found: by the entry point group. None: no vLLM to ask."""
    path = _vllm_file("plugins", "__init__.py")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            source = fh.read()
    except OSError:
        return False
    return "def load_general_plugins" in source and "vllm.general_plugins" in source


# Where vLLM keeps DefaultModelLoader (0.6+, then 0.5.x): the class R8's plugin looks up the same way.
LOADER_FILES = (("model_executor", "model_loader", "default_loader.py"), ("model_executor", "model_loader", "loader.py"))


def weights_iterator_hook() -> Optional[bool]:
    """Whether DefaultModelLoader has `_get_weights_iterator`, the method R8's plugin wraps (read
    from the syntax tree: importing the loader needs torch). None: no vLLM to ask."""
    import ast

    if not _vllm_file():
        return None
    for parts in LOADER_FILES:
        try:
            with open(_vllm_file(*parts), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == "DefaultModelLoader":
                return any(isinstance(n, ast.FunctionDef) and n.name == "_get_weights_iterator" for n in node.body)
    return False


def cpu_build() -> Optional[bool]:
    """Whether this vLLM is a CPU build: its distribution version says so (0.5.5+cpu, as vLLM
    itself decides in is_cpu()). None: no vLLM."""
    version = _dist_version("vllm")
    return None if not version else "cpu" in version


def fused_moe_cpu() -> Optional[bool]:
    """Whether the fused MoE layer's unquantized method has a CPU path: False when its
    `forward_cpu` only raises (vLLM 0.5.5), read from the syntax tree. None: no such layer file."""
    import ast

    try:
        with open(_vllm_file("model_executor", "layers", "fused_moe", "layer.py"), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "UnquantizedFusedMoEMethod":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "forward_cpu":
                    body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
                    return not (len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.dump(body[0]))
            return True  # no forward_cpu of its own: the base class's path (later engines) runs
    return None


# Where vLLM keeps `_get_and_verify_max_len` and ModelConfig: 0.6+ (config/model.py), then 0.5.x.
MAX_LEN_FILES = (("config", "model.py"), ("config.py",))


def max_model_len_rules() -> Optional[Dict[str, Any]]:
    """How the engine derives a model's longest context and refuses a longer --max-model-len,
    read from the syntax tree of its `_get_and_verify_max_len` and ModelConfig (importing them
    needs torch): the config keys it takes the smallest of, the rope scaling kinds that do not
    stretch it, the model types whose scaling it never applies (already scaled), whether YaRN
    starts from original_max_position_embeddings, whether a rope_scaling without `factor` fails,
    whether VLLM_ALLOW_LONG_MAX_MODEL_LEN lifts the refusal, and the model types whose sliding
    window it turns off and caps the length to (0.5.5's Gemma 2), with no backend condition.
    None: no vLLM to ask, or no such function where it is looked for."""
    import ast

    for parts in MAX_LEN_FILES:
        path = _vllm_file(*parts)
        try:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            continue
        func = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_get_and_verify_max_len"), None)
        if func is None:
            continue
        keys = _strings_assigned(func, "possible_keys") or _keys_elsewhere()
        return {
            "keys": keys,
            "unscaled_rope_types": sorted(_not_in_tuple(func, "rope_type")),
            "unscaled_model_types": sorted(_substring_exemptions(func)),
            "yarn_from_original": any(
                isinstance(n, ast.Constant) and n.value == "original_max_position_embeddings" for n in ast.walk(func)
            ),
            "factor_required": any(isinstance(n, ast.Assert) and "factor" in ast.dump(n) for n in ast.walk(func)),
            "allow_long_env": any(isinstance(n, ast.Attribute) and n.attr == "VLLM_ALLOW_LONG_MAX_MODEL_LEN" for n in ast.walk(func)),
            "window_capped_model_types": sorted(_window_caps(tree)),
        }
    return None if not _vllm_file() else None


# vLLM 0.32 derives the length in its model-architecture converter and hands it over.
KEY_FILES = (("transformers_utils", "model_arch_config_convertor.py"),)


def _keys_elsewhere() -> List[str]:
    import ast

    for parts in KEY_FILES:
        try:
            with open(_vllm_file(*parts), encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "derive_max_model_len_and_key":
                return _strings_assigned(node, "possible_keys")
    return []


def _strings_assigned(func: Any, name: str) -> List[str]:
    import ast

    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                return [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def _not_in_tuple(func: Any, name: str) -> List[str]:
    """The strings of `name not in (...)`."""
    import ast

    out: List[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == name:
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.NotIn) and isinstance(comp, (ast.Tuple, ast.List)):
                    out += [e.value for e in comp.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return out


def _substring_exemptions(func: Any) -> List[str]:
    """The strings of `"x" not in <...>.model_type` (0.11: Gemma 3's length is already scaled)."""
    import ast

    out: List[str] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            for op, comp in zip(node.ops, node.comparators, strict=True):
                if isinstance(op, ast.NotIn) and isinstance(comp, ast.Attribute) and comp.attr == "model_type":
                    out.append(node.left.value)
    return out


def _window_caps(tree: Any) -> List[str]:
    """Model types for which an `if` sets `self.disable_sliding_window = True` on the model type
    alone (no environment or backend in its test)."""
    import ast

    out: List[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        sets = any(
            isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == "disable_sliding_window" for t in s.targets)
            and isinstance(s.value, ast.Constant)
            and s.value.value is True
            for s in node.body
        )
        if not sets or any(isinstance(n, ast.Name) and n.id == "envs" for n in ast.walk(node.test)):
            continue
        for cmp in ast.walk(node.test):
            if isinstance(cmp, ast.Compare) and isinstance(cmp.left, ast.Attribute) and cmp.left.attr == "model_type":
                out += [
                    c.value
                    for op, c in zip(cmp.ops, cmp.comparators, strict=True)
                    if isinstance(op, ast.Eq) and isinstance(c, ast.Constant)
                ]
    return out


# Where vLLM keeps what decides the KV cache's size: 0.6+ splits config.py into a package.
CONFIG_FILES = (("config", "cache.py"), ("config", "scheduler.py"), ("config", "model.py"), ("config.py",))
ARG_FILE = ("engine", "arg_utils.py")
# The check that refuses a --max-model-len the KV cache cannot hold: V1's (0.8+: the sum over
# layers of each layer's pages for one request) and the V0 worker's (0.5.5: whole blocks of every
# layer, block_size tokens each).
KV_CHECKS = (
    ("pages", ("v1", "core", "kv_cache_utils.py"), "check_enough_kv_cache_memory"),
    ("blocks", ("worker", "worker.py"), "raise_if_cache_size_invalid"),
)
KV_SPECS = ("v1", "kv_cache_interface.py")


def _tree(*parts: str) -> Any:
    import ast

    path = _vllm_file(*parts)
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _class_defaults(tree: Any, name: str) -> Dict[str, Any]:
    """field -> its default as written in class `name` (a literal, or "Class.field")."""
    import ast

    out: Dict[str, Any] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.ClassDef) and node.name == name:
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
                    value = stmt.value
                    if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "Field":  # 0.32's pydantic fields
                        value = next((k.value for k in value.keywords if k.arg == "default"), value)
                    if isinstance(value, ast.Constant):
                        out[stmt.target.id] = value.value
                    elif isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name):
                        out[stmt.target.id] = f"{value.value.id}.{value.attr}"
    return out


def _engine_default(field: str) -> Any:
    """EngineArgs' default of `field`, followed into the config class it names (0.11:
    `CacheConfig.gpu_memory_utilization`); None where it is None or not a literal."""
    value = _class_defaults(_tree(*ARG_FILE), "EngineArgs").get(field)
    if isinstance(value, str) and "." in value:
        owner, attr = value.split(".", 1)
        for parts in CONFIG_FILES:
            found = _class_defaults(_tree(*parts), owner)
            if attr in found:
                return found[attr]
        return None
    return value


def _cuda_block_size() -> Optional[int]:
    """The block size the CUDA platform sets where the engine leaves it unset (0.11: 16)."""
    import ast

    tree = _tree("platforms", "cuda.py")
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, int):
            if any(isinstance(t, ast.Attribute) and t.attr == "block_size" for t in node.targets):
                return node.value.value
    return None


def _server_defaults() -> Dict[str, int]:
    """What `vllm serve` (UsageContext.OPENAI_API_SERVER) takes for max_num_batched_tokens and
    max_num_seqs where the flags are not given, on GPUs under 70 GiB or named A100 (every card
    here): the `else` branch of EngineArgs' device test."""
    import ast

    tree = _tree(*ARG_FILE)
    out: Dict[str, int] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if not (isinstance(node, ast.If) and "GiB_bytes" in ast.dump(node.test)):
            continue
        for stmt in node.orelse:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict) and isinstance(stmt.targets[0], ast.Name):
                for key, value in zip(stmt.value.keys, stmt.value.values, strict=True):
                    if isinstance(key, ast.Attribute) and key.attr == "OPENAI_API_SERVER" and isinstance(value, ast.Constant):
                        out[stmt.targets[0].id.replace("default_", "")] = value.value
    return out


def _v0_batched_tokens() -> Dict[str, int]:
    """vLLM 0.5.5's token budget of its profiling run: max(max_model_len, MIN) tokens, or the
    chunked-prefill budget, which it turns on by itself past a context length on a GPU."""
    import ast

    out: Dict[str, int] = {}
    for parts in CONFIG_FILES:
        tree = _tree(*parts)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and node.name == "__init__" and "max_num_batched_tokens" in ast.dump(node):
                for sub in ast.walk(node):
                    if (
                        isinstance(sub, ast.Assign)
                        and any(isinstance(t, ast.Attribute) and t.attr == "max_num_batched_tokens" for t in sub.targets)
                        and isinstance(sub.value, ast.Constant)
                        and "chunked_prefill_tokens" not in out
                    ):
                        out["chunked_prefill_tokens"] = sub.value.value
                    if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "max":
                        names = [a.id for a in sub.args if isinstance(a, ast.Name)]
                        numbers = [a.value for a in sub.args if isinstance(a, ast.Constant) and isinstance(a.value, int)]
                        if names == ["max_model_len"] and numbers and "min_batched_tokens" not in out:
                            out["min_batched_tokens"] = numbers[0]
    tree = _tree(*ARG_FILE)
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "use_long_context" for t in node.targets):
            if isinstance(node.value, ast.Compare) and isinstance(node.value.comparators[0], ast.Constant):
                out["long_context_chunked_prefill"] = node.value.comparators[0].value
    return out


def _has_function(parts: Any, name: str) -> bool:
    import ast

    tree = _tree(*parts)
    return tree is not None and any(isinstance(n, ast.FunctionDef) and n.name == name for n in ast.walk(tree))


def _mla_model_types() -> List[str]:
    """The model types whose KV cache is MLA's one latent per token (is_deepseek_mla)."""
    import ast

    # 0.32 moved the test into its model-architecture converter.
    for parts in (("config", "model.py"), ("config.py",), ("transformers_utils", "model_arch_config_convertor.py")):
        tree = _tree(*parts)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.FunctionDef) and node.name == "is_deepseek_mla":
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Compare) and isinstance(sub.comparators[0], ast.Tuple):
                        return sorted(e.value for e in sub.comparators[0].elts if isinstance(e, ast.Constant))
    return []


def _padded_head_sizes() -> Dict[str, int]:
    """model_type -> the head size get_head_size returns for it whatever the config says
    (0.5.5 pads DeepSeek-V2's 192 to 256, and caches every head at that size)."""
    import ast

    out: Dict[str, int] = {}
    for parts in (("config", "model.py"), ("config.py",)):
        tree = _tree(*parts)
        for node in ast.walk(tree) if tree is not None else ():
            if not (isinstance(node, ast.FunctionDef) and node.name == "get_head_size"):
                continue
            for sub in node.body:
                if not isinstance(sub, ast.If) or not any(
                    isinstance(b, ast.Return) and isinstance(b.value, ast.Constant) for b in sub.body
                ):
                    continue
                value = next(b.value.value for b in sub.body if isinstance(b, ast.Return))
                for cmp in ast.walk(sub.test):
                    if isinstance(cmp, ast.Compare) and isinstance(cmp.left, ast.Attribute) and cmp.left.attr == "model_type":
                        out.update({c.value: value for c in cmp.comparators if isinstance(c, ast.Constant)})
        if out:
            break
    return out


def memory_rules() -> Optional[Dict[str, Any]]:
    """How the engine sizes its KV cache and refuses a --max-model-len it cannot hold, read
    from its source (nothing imported): the check (`pages`: V1's sum of every layer's pages for
    one request, where windowed layers hold their window and linear-attention layers one state;
    `blocks`: 0.5.5's whole blocks of every layer, windows or not), its defaults
    (gpu_memory_utilization, block size, the token and sequence budget of the profiling run) and
    the KV layouts it knows (MLA's latent, a padded head size). None: no vLLM to ask."""
    if not _vllm_file():
        return None
    kv_check = next((kind for kind, parts, func in KV_CHECKS if _has_function(parts, func)), None)
    specs = _tree(*KV_SPECS)
    classes = set()
    if specs is not None:
        import ast

        classes = {n.name for n in ast.walk(specs) if isinstance(n, ast.ClassDef)}
    block_size = _engine_default("block_size")
    server = _server_defaults()
    facts: Dict[str, Any] = {
        "kv_check": kv_check,
        "gpu_memory_utilization": _engine_default("gpu_memory_utilization"),
        "block_size": block_size if isinstance(block_size, int) else _cuda_block_size(),
        "max_num_seqs": _engine_default("max_num_seqs") or server.get("max_num_seqs"),
        "max_num_batched_tokens": _engine_default("max_num_batched_tokens") or server.get("max_num_batched_tokens"),
        "window_layers": "SlidingWindowSpec" in classes,
        "linear_state": "MambaSpec" in classes,
        "mla_latent": "MLAAttentionSpec" in classes,
        "mla_model_types": _mla_model_types(),
        "padded_head_sizes": _padded_head_sizes(),
        # Whether --kv-cache-memory-bytes sets the KV space outright (no utilization, no profiling).
        "kv_cache_memory_flag": "kv_cache_memory_bytes" in _class_defaults(_tree(*ARG_FILE), "EngineArgs"),
    }
    facts.update(_v0_batched_tokens() if kv_check == "blocks" else {})
    return facts


# The engine API the runtime package's backports (common/vllm_plugin/compat_backports) call:
# "file under vllm/:Class[.method]" or ":function". A backport fits an engine only when every
# symbol it lists is here with the parameters it passes; a test holds the two lists together.
LAYER_API = (
    "attention/layer.py:Attention",
    "attention/layer.py:Attention.forward",
    "model_executor/layers/linear.py:QKVParallelLinear",
    "model_executor/layers/linear.py:MergedColumnParallelLinear",
    "model_executor/layers/linear.py:RowParallelLinear",
    "model_executor/layers/linear.py:ReplicatedLinear",
    "model_executor/layers/layernorm.py:RMSNorm",
    "model_executor/layers/layernorm.py:RMSNorm.forward_native",
    "model_executor/layers/layernorm.py:GemmaRMSNorm",
    "model_executor/layers/rotary_embedding.py:get_rope",
    "model_executor/layers/rotary_embedding.py:RotaryEmbedding",
    "model_executor/layers/rotary_embedding.py:RotaryEmbedding._compute_inv_freq",
    "model_executor/layers/rotary_embedding.py:YaRNScalingRotaryEmbedding",
    "model_executor/layers/activation.py:SiluAndMul",
    "model_executor/layers/activation.py:GeluAndMul",
    "model_executor/layers/vocab_parallel_embedding.py:VocabParallelEmbedding",
    "model_executor/layers/vocab_parallel_embedding.py:ParallelLMHead",
    "model_executor/layers/logits_processor.py:LogitsProcessor",
    "model_executor/layers/logits_processor.py:LogitsProcessor.forward",
    "model_executor/models/utils.py:make_layers",
    "model_executor/models/utils.py:is_pp_missing_parameter",
    "model_executor/models/__init__.py:ModelRegistry.register_model",
    "model_executor/model_loader/loader.py:build_model",
    "model_executor/models/llama.py:LlamaForCausalLM",
    "model_executor/models/starcoder2.py:Starcoder2ForCausalLM",
    "distributed/communication_op.py:tensor_model_parallel_all_reduce",
    "distributed/parallel_state.py:get_tensor_model_parallel_rank",
    "model_executor/utils.py:set_weight_attrs",
    "config.py:CacheConfig",
    "model_executor/layers/fused_moe/layer.py:FusedMoE",
    "model_executor/layers/fused_moe/layer.py:FusedMoE.make_expert_params_mapping",
    "model_executor/layers/linear.py:ColumnParallelLinear",
    "config.py:ModelConfig.get_layers_block_type",
    "model_executor/models/interfaces.py:has_inner_state",
    "worker/cpu_model_runner.py:CPUModelRunner.prepare_model_input",
    # The V1 engine's model API (vLLM 0.11): what the backports written for it call (compat_backports' BACKPORTS_V1).
    "model_executor/model_loader/utils.py:initialize_model",
    "model_executor/models/registry.py:_ModelRegistry.register_model",
    "model_executor/layers/rotary_embedding/__init__.py:get_rope",
    "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding",
    "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding._compute_inv_freq",
    "model_executor/layers/rotary_embedding/yarn_scaling_rope.py:YaRNScalingRotaryEmbedding",
    "model_executor/models/utils.py:extract_layer_index",
    "model_executor/models/utils.py:maybe_prefix",
    "model_executor/models/gemma3.py:Gemma3MLP",
    "model_executor/models/llama.py:LlamaDecoderLayer",
    "config/__init__.py:VllmConfig.with_hf_config",
    "compilation/decorators.py:support_torch_compile",
    "model_executor/models/utils.py:make_empty_intermediate_tensors_factory",
    "model_executor/model_loader/weight_utils.py:default_weight_loader",
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet",
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet.forward",
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet.fix_query_key_value_ordering",
    "model_executor/models/qwen3_next.py:Qwen3NextAttention",
    "model_executor/models/qwen3_next.py:Qwen3NextAttention.forward",
    "model_executor/models/qwen3_next.py:Qwen3NextModel.forward",
    "model_executor/models/qwen3_next.py:Qwen3NextModel.get_input_embeddings",
    "model_executor/models/qwen3_next.py:Qwen3NextSparseMoeBlock",
    "model_executor/models/qwen2_moe.py:Qwen2MoeMLP",
    "model_executor/models/interfaces.py:HasInnerState",
    "model_executor/models/interfaces.py:IsHybrid",
    "model_executor/layers/mamba/mamba_utils.py:MambaStateShapeCalculator.gated_delta_net_state_shape",
    "model_executor/layers/mamba/mamba_utils.py:MambaStateDtypeCalculator.gated_delta_net_state_dtype",
)


def layer_api(symbols: Any = LAYER_API) -> Optional[Dict[str, List[str]]]:
    """symbol -> the parameter names it takes, for each symbol the engine's vLLM defines where it
    says (common/engine_checks/layer_api.py: the preflight's own reader). None: no vLLM to ask."""
    from common.engine_checks import layer_api as probe

    root = probe.vllm_dir()
    return probe.probe(root, symbols) if root else None


def snapshot(vllm_source: str = "") -> Dict[str, Any]:
    """Everything the profile records of the engine this interpreter runs. The garbage collector
    is off meanwhile: once vLLM and torch are imported, its full collections walk their half a
    million objects again and again while the modeling sources are parsed (8 of the snapshot's
    20 s on two cores), and nothing here leaves cycles worth collecting before it returns."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _snapshot(vllm_source)
    finally:
        if enabled:
            gc.enable()


def _snapshot(vllm_source: str) -> Dict[str, Any]:
    data: Dict[str, Any] = {
        "vllm_version": _dist_version("vllm"),
        "transformers_version": _dist_version("transformers"),
        "architectures": vllm_architectures(),
        "engine_args": engine_args(vllm_source),
        "transformers_backend": transformers_backend(),
        "backend_compatible_architectures": backend_compatible_architectures(),
        "quantization_methods": quantization_methods(),
        "head_dim_none_fallback": head_dim_none_fallback(),
        "null_head_dim_model_types": null_head_dim_model_types(),
        "config_attribute_maps": config_attribute_maps(),
        "reads": reads_transformers5_format(),
        "serve_config_file": serve_config_file(),
        "general_plugins": general_plugins(),
        "weights_iterator_hook": weights_iterator_hook(),
        "layer_api": layer_api(),
        "max_model_len": max_model_len_rules(),
        "cpu_build": cpu_build(),
        "fused_moe_cpu": fused_moe_cpu(),
        "memory": memory_rules(),
    }
    data.update(transformers_tables())
    # Last: importing vLLM's config module registers its config classes with transformers'
    # AutoConfig, which the tables above must not count as transformers' own.
    data["own_config_classes"] = own_config_classes()
    return data


if __name__ == "__main__":
    # Some config classes of transformers 5 fetch files from a hub when built with their
    # defaults: a snapshot (at image build, or `make profiles`) never reaches for the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # Run as a script under the engine's Python: the checkout's root (the build context's steps/)
    # goes last on sys.path, for common.engine_checks.layer_api; the engine's packages stay first.
    ROOT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if ROOT_DIR not in sys.path:
        sys.path.append(ROOT_DIR)
    # vLLM logs to stdout on import, so the JSON goes to a file named on the command line.
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: snapshot_engine.py OUT.json [VLLM_SOURCE_TREE]")
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(snapshot(sys.argv[2] if len(sys.argv) == 3 else ""), out, indent=1, sort_keys=True)
        out.write("\n")
