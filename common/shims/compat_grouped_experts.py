"""The MoE core the R7 shim (ixformer/contrib/vllm/layers.py) and the image's plugin share: routed
experts computed with tokens grouped by expert (each expert runs only on its own tokens), or on
a static-shape path with no host synchronisation while a CUDA graph is being captured.

One implementation, two ways in: the shim imports it by this top-level name (the shim directory
is first on PYTHONPATH under R7), and the plugin as common.shims.compat_grouped_experts
(compat_patches/cpu_moe.py: R11's CPU experts, and Gemma 4's experts in its backports).
Standard library and torch only.
"""

import torch
import torch.nn.functional as F


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
