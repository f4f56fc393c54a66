"""Pure-PyTorch stand-in for the vendor's `ixformer.contrib.vllm.layers` (R7).

The BI-100 vLLM fork's mixtral.py imports `mixtral_decoder_layer_forward` from this module, which
some ixformer builds lack. The vendor function's signature is not public, so the shim reads its
arguments defensively and computes what upstream vLLM's `MixtralDecoderLayer.forward` computes
with the layer's own submodules; the sparse-MoE part runs on a vectorised core (tokens grouped
by expert, no Python loop over tokens). While a CUDA graph is being captured (vLLM's decode
graphs) the core switches to a static-shape path with no host synchronisation, because the
grouped path reads per-expert counts on the host. Anything it cannot interpret raises a ShimError
naming the shim and the call.
"""

import inspect

import compat_grouped_experts as core
import torch
from compat_grouped_experts import (  # noqa: F401  the core's names, as this module has always offered them
    experts_grouped,
    experts_routed,
    experts_static,
    moe_forward,
    moe_forward_grouped,
    moe_forward_static,
    static_moe_required,
)

SHIM = "enginex-compat shim ixformer.contrib.vllm.layers"


class ShimError(TypeError):
    pass


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def sparse_moe(block, hidden_states: torch.Tensor) -> torch.Tensor:
    """The block's MoE on the vectorised core when its weights are reachable, else the block."""
    experts = getattr(block, "experts", None)
    w13, w2 = getattr(experts, "w13_weight", None), getattr(experts, "w2_weight", None)
    gate = getattr(block, "gate", None)
    if w13 is None or w2 is None or gate is None:
        return block(hidden_states)
    top_k = getattr(experts, "top_k", None) or getattr(block, "top_k", None)
    if not top_k:
        raise ShimError(f"{SHIM}: the MoE block exposes no top_k")
    renormalize = getattr(experts, "renormalize", True)
    flat = hidden_states.reshape(-1, hidden_states.shape[-1])
    out = core.moe_forward(flat, _first(gate(flat)), w13, w2, int(top_k), bool(renormalize))
    return out.reshape(hidden_states.shape)


def _norm(norm, hidden_states, residual):
    if residual is None:
        return norm(hidden_states), hidden_states
    fused = norm(hidden_states, residual)
    if isinstance(fused, tuple):
        return fused
    raise ShimError(f"{SHIM}: {type(norm).__name__}(hidden_states, residual) returned no (out, residual) pair")


def _attention_kwargs(attn, positions, hidden_states, extra):
    params = inspect.signature(attn.forward).parameters
    kwargs = {"positions": positions, "hidden_states": hidden_states}
    for name in ("kv_cache", "attn_metadata"):
        if name in params and name in extra:
            kwargs[name] = extra[name]
    return kwargs


def mixtral_decoder_layer_forward(layer, *args, **kwargs):
    """(hidden_states, residual) of one Mixtral decoder layer, as upstream vLLM computes it.

    Accepts upstream's call shapes: (layer, positions, hidden_states, residual) and the
    0.5-era (layer, positions, hidden_states, kv_cache, attn_metadata, residual), positional or
    by keyword.
    """
    names = ["positions", "hidden_states"]
    if len(args) + len(kwargs) >= 5:
        names += ["kv_cache", "attn_metadata"]
    names.append("residual")
    if len(args) > len(names):
        raise ShimError(f"{SHIM}: mixtral_decoder_layer_forward got {len(args)} positional arguments; expected at most {len(names)}")
    call = dict(zip(names, args, strict=False))  # fewer args than names: residual may be omitted
    for key, value in kwargs.items():
        if key in call:
            raise ShimError(f"{SHIM}: mixtral_decoder_layer_forward got {key!r} twice")
        call[key] = value
    missing = [n for n in ("positions", "hidden_states") if n not in call]
    unknown = sorted(set(call) - {"positions", "hidden_states", "kv_cache", "attn_metadata", "residual"})
    if missing or unknown:
        raise ShimError(f"{SHIM}: cannot interpret mixtral_decoder_layer_forward(missing={missing}, unknown={unknown})")
    for sub in ("input_layernorm", "self_attn", "post_attention_layernorm", "block_sparse_moe"):
        if not hasattr(layer, sub):
            raise ShimError(f"{SHIM}: decoder layer {type(layer).__name__} has no {sub}")
    hidden, residual = _norm(layer.input_layernorm, call["hidden_states"], call.get("residual"))
    hidden = layer.self_attn(**_attention_kwargs(layer.self_attn, call["positions"], hidden, call))
    hidden, residual = _norm(layer.post_attention_layernorm, hidden, residual)
    return sparse_moe(layer.block_sparse_moe, hidden), residual


__all__ = [
    "ShimError",
    "mixtral_decoder_layer_forward",
    "moe_forward",
    "moe_forward_grouped",
    "moe_forward_static",
    "sparse_moe",
    "static_moe_required",
]
