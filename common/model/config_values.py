"""A configuration's values as the classes that decide which code path an engine takes.

doctor's token layer is deny-by-default: a model is `proven` only when every value its
architecture's model code reads (common/engine/model_fields.json, generated from the engine's, the
backport's and the author's source) was exercised by an exact conformance cell. Two values are
the same for that purpose when they take the same path through the code:
  - a categorical value is itself: a string (an activation name, a rope kind, a layer type), a
    boolean switch, null;
  - a number is its sign (zero takes other branches than a positive count or factor), except
    the sizes a kernel dispatches on, which are themselves (`@head_size`, `@rotary_dim`);
  - a list of numbers is one class (LongRoPE's factors, per-layer sizes), any other list is the
    set of its elements (every layer type must have been seen);
  - a nested object is its leaves, named by their dotted path (`rope_scaling.rope_type`).
Besides the fields the code reads, every model is judged on `@quantization` (the method of its
weights, or the platform's --quantization; none for a float checkpoint), and on the start's
`@tensor_parallel_size`, `@pipeline_parallel_size`, `@kv_cache_dtype` and `@dtype` (what --dtype
serves: every cell runs float32).
Standard library only.
"""

from __future__ import annotations

from .headsize import NESTED_TEXT_CONFIGS, attention_config, detect_head_size
from .json_numbers import number, positive_int

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

# Fields the model code reads that do not change what greedy decoding computes at inference:
# training-only switches, token ids that only label (padding, the ends a sampler stops at),
# output plumbing and load-time hints. A value of these never keeps a model unproven.
INERT_FIELDS = frozenset(
    (
        "attention_dropout",
        "hidden_dropout",
        "dropout",
        "embd_pdrop",
        "resid_pdrop",
        "attn_pdrop",
        "activation_dropout",
        "initializer_range",
        "initializer_factor",
        "use_cache",
        "output_attentions",
        "output_hidden_states",
        "output_router_logits",
        "return_dict",
        "use_return_dict",
        "gradient_checkpointing",
        "pad_token_id",
        "bos_token_id",
        "eos_token_id",
        "router_aux_loss_coef",
        "router_z_loss_coef",
        "torch_dtype",
        "dtype",
        "pretraining_tp",
        "is_decoder",
        "is_encoder_decoder",
        "num_labels",
        "problem_type",
        "tie_word_embeddings",  # a trait of its own (config_traits.py), judged there
    )
)
# A field its switch turns off for the engines and the author's code alike: the config classes
# of these model types (transformers 4.57 and 5) drop `sliding_window` when `use_sliding_window`
# is false, as vLLM's ModelConfig does, so a published Qwen2.5's 131072 under
# `use_sliding_window: false` is no window at all: classed as null. Elsewhere (transformers 5's
# Mistral reads the window whatever the switch says) the value counts as written.
SWITCHED_OFF_BY = {"sliding_window": "use_sliding_window"}
SWITCH_MODEL_TYPES = frozenset(
    ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_5_omni", "qwen3", "qwen3_moe", "qwen2_vl_text", "qwen2_5_vl_text")
)
# One field under the names transformers generations give it: 4.x writes rope_scaling and
# rope_theta, 5 writes rope_parameters. Whichever the model code reads, the config's own are judged.
SAME_FIELD = (frozenset(("rope_scaling", "rope_theta", "rope_parameters")),)
# The pseudo-fields every model is judged on, whatever its code reads.
QUANTIZATION = "@quantization"
TENSOR_PARALLEL = "@tensor_parallel_size"
PIPELINE_PARALLEL = "@pipeline_parallel_size"
KV_CACHE_DTYPE = "@kv_cache_dtype"
# The dtype the engine computes in: every cell runs float32 (the author's greedy ids are
# float32's), so a start in another dtype is a regime no cell ran.
DTYPE = "@dtype"
HEAD_SIZE = "@head_size"
ROTARY_DIM = "@rotary_dim"
# Sizes a kernel dispatches on, compared exactly (a head of 512 runs other code than one of 64),
# as `@head_size` is: Gemma 4's full-attention layers' head (`global_head_dim`) and each layer's
# own (transformers 5's `per_layer_config`).
EXACT_SIZES = frozenset(("global_head_dim", "per_layer_config[].head_dim"))
# Objects keyed by layer index (transformers 5's per_layer_config): their items are read as a
# list's, so that which layers carry an override does not make a path of its own.
BY_LAYER = frozenset(("per_layer_config",))
# Lists longer than this are read as their element classes only (a 128-layer pattern).
MAX_LEAVES = 4096


def value_class(value: Any) -> List[str]:
    """The classes of one value (a list of strings: a categorical list has one per element)."""
    if value is None:
        return ["null"]
    if isinstance(value, bool):
        return ["true" if value else "false"]
    if isinstance(value, (int, float)):
        if value != value:  # NaN: no branch takes it as a number
            return ["num:nan"]
        return ["num:0" if value == 0 else "num:+" if value > 0 else "num:-"]
    if isinstance(value, str):
        return ["str:" + value]
    if isinstance(value, list):
        if value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return ["list:num"]
        if not value:
            return ["list:empty"]
        out: Set[str] = set()
        for item in value[:MAX_LEAVES]:
            out.update("item:" + c for c in value_class(item))
        return sorted(out)
    return ["other:" + type(value).__name__]


def _leaves(prefix: str, value: Any, out: Dict[str, List[str]], depth: int = 0) -> None:
    if prefix in BY_LAYER and isinstance(value, dict):
        value = list(value.values())
    if prefix in EXACT_SIZES and positive_int(value) is not None:
        out[prefix] = [f"size:{value}"]
        return
    if isinstance(value, dict) and depth < 4:
        for key, item in value.items():
            if isinstance(key, str):
                _leaves(f"{prefix}.{key}", item, out, depth + 1)
        if not value:
            out[prefix] = ["dict:empty"]
        return
    if isinstance(value, list) and depth < 4 and any(isinstance(item, dict) for item in value):
        # A list of objects (per-block configs): the leaves of all its items, under `field[]`.
        for item in value[:MAX_LEAVES]:
            found: Dict[str, List[str]] = {}
            _leaves(f"{prefix}[]", item, found, depth + 1)
            for path, classes in found.items():
                out[path] = sorted(set(out.get(path, [])) | set(classes))
        return
    out[prefix] = value_class(value)


def reading_config(config: Mapping[str, Any]) -> Dict[str, Any]:
    """The keys the language model's code reads: a nested text config over the top level."""
    where, cfg = attention_config(dict(config))
    merged = {k: v for k, v in config.items() if k not in NESTED_TEXT_CONFIGS}
    if where is not None:
        merged.update(cfg)
    return merged


def quantization_method(config: Mapping[str, Any], quantize_config: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The method of a quantized checkpoint: config.json's quantization_config (or
    compression_config, its older name vLLM reads too; one that names no method is "unknown"),
    or a file beside it (doctor.quantize_files: AutoGPTQ's quantize_config.json, which vLLM reads
    as GPTQ, ModelOpt's hf_quant_config.json)."""
    for key in ("quantization_config", "compression_config"):
        if key in config and config[key] is not None:
            quant = config[key]
            method = quant.get("quant_method") if isinstance(quant, dict) else None
            return method.lower() if isinstance(method, str) and method else "unknown"
    if quantize_config is not None:
        method = quantize_config.get("quant_method") if isinstance(quantize_config, dict) else None
        return method.lower() if isinstance(method, str) and method else "gptq"
    return None


def rotary_dim(cfg: Mapping[str, Any], head: Optional[int]) -> Optional[int]:
    dim = cfg.get("rotary_dim")
    if positive_int(dim) is not None:
        return dim
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    for factor in (cfg.get("partial_rotary_factor"), cfg.get("rotary_pct"), params.get("partial_rotary_factor")):
        if number(factor, 0.0, 1.0, low_open=True) is not None and head:
            return int(head * factor)
    return head


def config_values(
    config: Mapping[str, Any],
    fields: Iterable[str],
    quantize_config: Optional[Mapping[str, Any]] = None,
    tensor_parallel: int = 1,
    quantization: Optional[str] = None,
    kv_cache_dtype: str = "auto",
    pipeline_parallel: int = 1,
    dtype: str = "float32",
) -> Dict[str, List[str]]:
    """{field path: its classes} for the `fields` the model code reads (inert ones left out),
    plus the pseudo-fields, the start's arguments among them (`quantization`: the platform's
    --quantization over the checkpoint's method). A field the file leaves out is left out here
    too: the engine then reads its class's default, which every cell's save writes out."""
    cfg = reading_config(config)
    read = set(fields)
    for names in SAME_FIELD:
        if read & names:
            read |= names
    switched = cfg.get("model_type") in SWITCH_MODEL_TYPES or config.get("model_type") in SWITCH_MODEL_TYPES
    out: Dict[str, List[str]] = {}
    for field in sorted(read):
        if field in INERT_FIELDS or field not in cfg:
            continue
        switch = SWITCHED_OFF_BY.get(field)
        off = switched and switch is not None and cfg.get(switch) is False
        _leaves(field, None if off else cfg[field], out)
    try:
        head = detect_head_size(dict(config)).value
    except Exception:  # noqa: B902 - a size nothing can read: judged unplaceable below
        head = None
    out[HEAD_SIZE] = [f"size:{head}" if head else "unknown"]
    rotary = rotary_dim(cfg, head)
    out[ROTARY_DIM] = [f"size:{rotary}" if rotary else "unknown"]
    method = quantization if isinstance(quantization, str) and quantization else quantization_method(config, quantize_config)
    out[QUANTIZATION] = ["str:" + method.lower()] if method else ["null"]
    out[TENSOR_PARALLEL] = [f"size:{tensor_parallel}"]
    out[PIPELINE_PARALLEL] = [f"size:{pipeline_parallel}"]
    out[KV_CACHE_DTYPE] = ["str:" + str(kv_cache_dtype)]
    out[DTYPE] = ["str:" + str(dtype)]
    return out


def merge_coverage(into: Dict[str, List[str]], values: Mapping[str, List[str]]) -> None:
    """Add one exact cell's values to a coverage table ({path: sorted classes seen})."""
    for path, classes in values.items():
        into[path] = sorted(set(into.get(path, [])) | set(classes))


def uncovered(values: Mapping[str, List[str]], coverage: Mapping[str, List[str]]) -> List[str]:
    """The `path=class` of every value no cell exercised, e.g. `hidden_act=str:gelu`."""
    out = []
    for path in sorted(values):
        seen = coverage.get(path)
        for cls in values[path]:
            if seen is None or cls not in seen:
                out.append(f"{path}={_readable(cls)}")
    return out


def _readable(cls: str) -> str:
    """`str:gelu` -> `gelu`, `size:32` -> `32`, `num:0` -> `0`; a string that reads as a number
    quoted (`"8"`: a string where the code expects a number); the rest as it is."""
    for prefix in ("str:", "item:str:"):
        if cls.startswith(prefix):
            text = cls[len(prefix) :]
            try:
                float(text)
            except ValueError:
                return text
            return f'"{text}"'
    if cls.startswith("size:"):
        return cls[len("size:") :]
    words = {"num:0": "0", "num:+": "a positive number", "num:-": "a negative number", "num:nan": "NaN"}
    return words.get(cls, cls)
