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

import torch
import torch.nn.functional as F

SHIM = "enginex-compat shim ixformer.contrib.vllm.layers"


class ShimError(TypeError):
    pass


def _route(router_logits: torch.Tensor, tokens: int, num_experts: int, top_k: int, renormalize: bool, dtype: torch.dtype):
    weights = F.softmax(router_logits.reshape(tokens, num_experts), dim=-1, dtype=torch.float)
    weights, experts = torch.topk(weights, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(dtype), experts


def moe_forward_grouped(
    hidden_states: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int, renormalize: bool = True
) -> torch.Tensor:
    """The MoE with tokens grouped by expert: each expert runs only on its own tokens.

    Reads the per-expert token counts on the host, so it cannot run inside CUDA graph capture.
    """
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    weights, experts = _route(router_logits, x.shape[0], w13.shape[0], top_k, renormalize, x.dtype)
    return experts_grouped(x, weights, experts, w13, w2).reshape(shape)


def experts_grouped(
    x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, act=F.silu
) -> torch.Tensor:
    """The gated experts of routed tokens, act(gate) * up (SiLU unless `act` says otherwise: Gemma 4's
    are tanh-GELU): x [T, H], each token's top-k `experts` [T, k] and their `weights` [T, k] (any
    routing: softmax top-k, DeepSeek's grouped top-k, Gemma 4's per-expert scaled one)."""
    num_experts, top_k = w13.shape[0], experts.shape[-1]
    # Group the (token, slot) pairs by expert with one sort and one gather; each expert then runs
    # its matmuls on a contiguous slice of the sorted rows, and one index_add puts them back.
    flat_experts = experts.reshape(-1)
    order = torch.argsort(flat_experts, stable=True)
    token_of = order // top_k
    counts = torch.bincount(flat_experts, minlength=num_experts).tolist()
    rows = x.index_select(0, token_of)
    scale = weights.reshape(-1)[order].unsqueeze(-1).to(x.dtype)
    done = torch.empty_like(rows)
    inter = w2.shape[-1]
    start = 0
    for expert, count in enumerate(counts):
        if count == 0:
            continue
        end = start + count
        gate_up = rows[start:end] @ w13[expert].t()
        done[start:end] = (act(gate_up[:, :inter]) * gate_up[:, inter:]) @ w2[expert].t()
        start = end
    return torch.zeros_like(x).index_add_(0, token_of, done * scale)


def moe_forward_static(
    hidden_states: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int, renormalize: bool = True
) -> torch.Tensor:
    """The same MoE with static shapes and no host synchronisation (safe in CUDA graph capture)."""
    shape = hidden_states.shape
    x = hidden_states.reshape(-1, shape[-1])
    weights, experts = _route(router_logits, x.shape[0], w13.shape[0], top_k, renormalize, x.dtype)
    return experts_static(x, weights, experts, w13, w2).reshape(shape)


def experts_static(
    x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, act=F.silu
) -> torch.Tensor:
    """experts_grouped's result with static shapes: every expert runs over every token; a dense
    [tokens, experts] routing matrix (the top-k weights scattered, zero elsewhere) weights the
    results. It costs experts/top_k times the grouped path's FLOPs, which is why it is used only
    while a graph is being captured."""
    tokens, num_experts = x.shape[0], w13.shape[0]
    routing = torch.zeros(tokens, num_experts, dtype=x.dtype, device=x.device).scatter_(1, experts, weights.to(x.dtype))
    idle = torch.ones(tokens, num_experts, dtype=torch.bool, device=x.device).scatter_(1, experts, False)
    out = torch.zeros_like(x)
    inter = w2.shape[-1]
    for expert in range(num_experts):
        gate_up = x @ w13[expert].t()
        y = ((act(gate_up[:, :inter]) * gate_up[:, inter:]) @ w2[expert].t()).mul_(routing[:, expert : expert + 1])
        # A zero weight alone would turn an unselected expert's inf into NaN (0 * inf); the
        # grouped path never computes that expert for the token, so its result is masked out.
        out.add_(y.masked_fill_(idle[:, expert : expert + 1], 0))
    return out


def experts_routed(
    x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, act=F.silu
) -> torch.Tensor:
    """The gated experts of routed tokens: grouped, or static while a CUDA graph is captured."""
    path = experts_static if static_moe_required(x) else experts_grouped
    return path(x, weights, experts, w13, w2, act)


def static_moe_required(hidden_states: torch.Tensor) -> bool:
    """Whether the MoE must take the static path: a CUDA graph is being captured on this stream.

    vLLM captures its decode graphs unless --enforce-eager; the grouped path's host read of the
    expert counts is illegal there. Only a CUDA tensor can be under capture, which also keeps a
    CPU-only torch (whose capture query raises) from being asked.
    """
    if not hidden_states.is_cuda:
        return False
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except (AttributeError, RuntimeError):
        return False


def moe_forward(
    hidden_states: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, top_k: int, renormalize: bool = True
) -> torch.Tensor:
    """Mixtral sparse MoE: softmax router, top-k, optional renormalisation, SiLU-gated experts.

    hidden_states [T, H] (any leading shape is flattened); router_logits [T, E];
    w13 [E, 2I, H] (gate rows then up rows, vLLM's fused layout); w2 [E, H, I].
    Grouped path normally, static path under CUDA graph capture (see static_moe_required).
    """
    path = moe_forward_static if static_moe_required(hidden_states) else moe_forward_grouped
    return path(hidden_states, router_logits, w13, w2, top_k, renormalize)


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
    out = moe_forward(flat, _first(gate(flat)), w13, w2, int(top_k), bool(renormalize))
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
