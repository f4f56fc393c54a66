"""Per-layer head sizes on vLLM 0.5.5, whose KV cache has one head size for every layer.

Gemma 4 gives its full-attention layers a wider head than its sliding ones (`head_dim` for
sliding layers, `global_head_dim` for full ones: 256 and 512 in the published checkpoints).
transformers 5 saves that as `per_layer_config` (layer index -> overrides); configs written
before it carry `global_head_dim` (and `num_global_key_value_heads`, used only with
`attention_k_eq_v`: fewer KV heads on the full layers). vLLM 0.5.5 sizes every layer's KV cache
from one `head_dim` and one `num_key_value_heads` (ModelConfig.get_head_size / get_num_kv_heads),
read after the model is built: the cache is served right only when they are the widest head and
the most KV heads of any layer, every narrower layer zero-pads its heads to that size (a zero
column changes no dot product, and the padded output columns are dropped) and a layer with
fewer KV heads repeats each for the query heads of its group. R10 therefore writes the widest
head and the most KV heads into the config the engine reads and every other layer's own into
`per_layer_config`, a config that means the same model to transformers 5 and to the image's
config class for 4.x.

Gemma 4's last `num_kv_shared_layers` layers compute no keys and values of their own: each reads
those of the last earlier layer of its type (`kv_producers`), as transformers 5's
`kv_sharing_modes` says.

Standard library only: the preflight (R10) and the backport (inside the engine) both read it.
"""

from __future__ import annotations

from .windows import FULL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# What transformers 5 takes per layer in a Gemma 4 config; any other override is refused.
OVERRIDES = ("head_dim", "num_key_value_heads")
# transformers 5's value of `global_head_dim` when a config without per_layer_config omits it.
GLOBAL_HEAD_DIM = 512


def _get(config: Any, key: str, default: Any = None) -> Any:
    """A config.json dict's value or a config object's attribute."""
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def layer_overrides(config: Any) -> Dict[int, Dict[str, Any]]:
    """Layer index -> what it overrides, from `per_layer_config` (int or JSON string keys), else
    as transformers 5 derives it from `global_head_dim` for the full-attention layers."""
    explicit = _get(config, "per_layer_config")
    if isinstance(explicit, dict):
        out = {}
        for key, overrides in explicit.items():
            unknown = sorted(set(overrides) - set(OVERRIDES)) if isinstance(overrides, dict) else ["?"]
            if unknown:
                raise ValueError(f"backport: per_layer_config[{key}] overrides {unknown}; only {', '.join(OVERRIDES)} are supported")
            out[int(key)] = dict(overrides)
        return out
    overrides: Dict[str, Any] = {"head_dim": _get(config, "global_head_dim", GLOBAL_HEAD_DIM)}
    kv = _get(config, "num_global_key_value_heads")
    if kv is not None and _get(config, "attention_k_eq_v", False):  # the config class's default
        overrides["num_key_value_heads"] = kv
    types = _get(config, "layer_types") or []
    return {i: dict(overrides) for i, kind in enumerate(types) if kind == FULL}


def layer_heads(config: Any) -> List[Tuple[int, int]]:
    """Each layer's (head size, KV heads)."""
    head, kv = _get(config, "head_dim"), _get(config, "num_key_value_heads")
    overrides = layer_overrides(config)
    n = _get(config, "num_hidden_layers")
    if any(not 0 <= i < n for i in overrides):
        raise ValueError(f"backport: per_layer_config names layers outside 0..{n - 1}")
    return [(overrides.get(i, {}).get("head_dim", head), overrides.get(i, {}).get("num_key_value_heads", kv)) for i in range(n)]


def widest_head_edits(config: Dict[str, Any]) -> Dict[str, Any]:
    """The config.json edits that make the engine's head size the widest layer's and its KV heads
    the most any layer has, each layer keeping its own in per_layer_config; {} when the engine's
    are already those."""
    heads = layer_heads(config)
    widest, most = max(size for size, _ in heads), max(kv for _, kv in heads)
    edits: Dict[str, Any] = {}
    if widest != config.get("head_dim"):
        edits["head_dim"] = widest
    if most != config.get("num_key_value_heads"):
        edits["num_key_value_heads"] = most
    if not edits:
        return {}
    per_layer = {}
    for i, (size, kv) in enumerate(heads):
        own = {k: v for k, v in (("head_dim", size), ("num_key_value_heads", kv)) if v != (widest if k == "head_dim" else most)}
        if own:
            per_layer[str(i)] = own
    return dict(edits, per_layer_config=per_layer)


def kv_producers(config: Any) -> List[Optional[int]]:
    """Each layer's source of keys and values: None for its own, else the index of the layer it
    reuses (the last layer before the shared ones with the same layer type)."""
    n, shared = _get(config, "num_hidden_layers"), _get(config, "num_kv_shared_layers") or 0
    types = list(_get(config, "layer_types") or [])
    first = n - shared
    if shared and first <= 0:
        # transformers then reads every layer's keys and values from outside the model (an assistant's)
        raise ValueError("backport: every layer shares keys and values from outside the model")
    last = {kind: i for i, kind in enumerate(types[:first])}
    missing = sorted(set(types[first:]) - set(last))
    if missing:
        raise ValueError(f"backport: shared {missing} layers have no earlier layer of their type to read keys and values from")
    return [None if i < first else last[types[i]] for i in range(n)]
