"""Per-layer sliding windows and attention logit soft-capping for the CPU build's attention of
vLLM 0.5.5 (torch_sdpa).

The backend takes its window in the constructor, one per layer as windows.py builds them, but
(1) it makes the prefill mask once per batch, with the first layer's window, and hands it to every
layer after; (2) its decode reads each sequence's whole context from the paged cache (the engine
cuts decode contexts to one model-wide window in the model runner, which per-layer windows turn
off); (3) it refuses a soft cap (Gemma 2's tanh cap on the attention scores) in its constructor.
Installed by the plugin when it registers a backport whose layers carry their own windows
(Backport.windows), this wraps the backend for those layers only: the prefill gets the mask of
the layer's own window (kept per window on the batch's metadata), and the decode attends over the
window's slots of the paged cache, gathered through the block table, exactly the last `window`
positions as the author's transformers masks them; a soft-capped layer is taken by the
constructor and attends by hand in both (scores scaled, capped, masked, softmax in float32, as
transformers' eager attention). Layers with neither and every other model run the engine's code
unchanged. On the card the vendor's backend receives the same per-layer windows and caps in its
constructor.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

# Where vLLM 0.5.x keeps the CPU build's attention implementation.
IMPL = ("vllm.attention.backends.torch_sdpa", "TorchSDPABackendImpl")
# Set on the batch's metadata: window -> the prefill masks of that window.
MASKS = "compat_window_masks"
# Set on a layer's backend: the soft cap the engine's constructor would refuse.
CAP = "compat_soft_cap"


def _attend(self: Any, q: Any, k: Any, v: Any) -> Any:
    """Attention by hand of q [n, heads, size] over k, v [m, kv_heads, size], query i at position
    m - n + i: scaled, soft-capped, masked causally and by the layer's window, softmax in float32."""
    import torch

    n, m = q.shape[0], k.shape[0]
    heads, kv_heads = self.num_heads, self.num_kv_heads
    if kv_heads != heads:
        k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * self.scale
    cap = getattr(self, CAP, None)
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    pos_q, pos_k = torch.arange(m - n, m)[:, None], torch.arange(m)[None, :]
    allowed = pos_k <= pos_q
    if self.sliding_window is not None:
        allowed &= pos_k > pos_q - self.sliding_window
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.float().softmax(-1).to(q.dtype), v)


def _prefill_by_hand(
    self: Any, query: Any, key: Any, value: Any, kv_cache: Any, meta: Any, k_scale: float = 1.0, v_scale: float = 1.0, **_: Any
) -> Any:
    import torch
    from vllm.attention.ops.paged_attn import PagedAttention

    heads, size, kv_heads = self.num_heads, self.head_size, self.num_kv_heads
    query, key, value = query.view(-1, heads, size), key.view(-1, kv_heads, size), value.view(-1, kv_heads, size)
    key_cache, value_cache = PagedAttention.split_kv_cache(kv_cache, kv_heads, size)
    PagedAttention.write_to_paged_cache(key, value, key_cache, value_cache, meta.slot_mapping, self.kv_cache_dtype, k_scale, v_scale)
    if meta.block_tables.numel() != 0:
        raise RuntimeError("Torch SDPA backend doesn't support prefix decoding.")  # the engine's own refusal
    out, start = torch.empty_like(query), 0
    for length in meta.seq_lens:
        end = start + length
        out[start:end] = _attend(self, query[start:end], key[start:end], value[start:end])
        start = end
    return out.view(-1, heads * size)


def _prefill(
    original: Callable[..., Any], self: Any, query: Any, key: Any, value: Any, kv_cache: Any, meta: Any, *rest: Any, **kw: Any
) -> Any:
    from vllm.attention.backends.torch_sdpa import _make_sliding_window_bias

    masks = getattr(meta, MASKS, None)
    if masks is None:
        masks = {}
        setattr(meta, MASKS, masks)
    if self.sliding_window not in masks:
        masks[self.sliding_window] = _make_sliding_window_bias(meta.seq_lens, self.sliding_window, query.dtype)
    shared = meta.attn_bias  # what the layers without a window use (the engine caches theirs there)
    meta.attn_bias = masks[self.sliding_window]
    try:
        return original(self, query, key, value, kv_cache, meta, *rest, **kw)
    finally:
        meta.attn_bias = shared


def _decode(
    self: Any, query: Any, key: Any, value: Any, kv_cache: Any, meta: Any, k_scale: float = 1.0, v_scale: float = 1.0, **_: Any
) -> Any:
    import torch
    from torch.nn.functional import scaled_dot_product_attention
    from vllm.attention.ops.paged_attn import PagedAttention

    heads, size, kv_heads = self.num_heads, self.head_size, self.num_kv_heads
    query = query.view(-1, heads, size)
    key_cache, value_cache = PagedAttention.split_kv_cache(kv_cache, kv_heads, size)
    PagedAttention.write_to_paged_cache(
        key.view(-1, kv_heads, size),
        value.view(-1, kv_heads, size),
        key_cache,
        value_cache,
        meta.slot_mapping,
        self.kv_cache_dtype,
        k_scale,
        v_scale,
    )
    block = value_cache.shape[-1]
    window, capped = self.sliding_window, getattr(self, CAP, None) is not None
    out = torch.empty_like(query)
    for i, length in enumerate(meta.seq_lens_tensor.tolist()):
        positions = torch.arange(max(0, length - window) if window is not None else 0, length)
        blocks, offsets = meta.block_tables[i][positions // block], positions % block
        # key_cache: [blocks, kv_heads, size / x, block, x]; value_cache: [blocks, kv_heads, size, block].
        k = key_cache[blocks, :, :, offsets, :].reshape(len(positions), kv_heads, size)
        v = value_cache[blocks, :, :, offsets].reshape(len(positions), kv_heads, size)
        if capped:
            out[i] = _attend(self, query[i].unsqueeze(0), k, v)[0]
            continue
        if kv_heads != heads:
            k, v = k.repeat_interleave(heads // kv_heads, dim=1), v.repeat_interleave(heads // kv_heads, dim=1)
        out[i] = scaled_dot_product_attention(query[i].unsqueeze(1), k.transpose(0, 1), v.transpose(0, 1), scale=self.scale).squeeze(1)
    return out.view(-1, heads * size)


def _wrap_init(original: Callable[..., Any]) -> Callable[..., Any]:
    import inspect

    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kw: Any) -> None:
        bound = signature.bind(self, *args, **kw)
        cap = bound.arguments.get("logits_soft_cap")
        if cap is not None:
            bound.arguments["logits_soft_cap"] = None  # the engine's constructor refuses it; forward applies it
        original(*bound.args, **bound.kwargs)
        setattr(self, CAP, cap)

    __init__.compat_windows = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def _wrap(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, query: Any, key: Any, value: Any, kv_cache: Any, attn_metadata: Any, *rest: Any, **kw: Any) -> Any:
        capped = getattr(self, CAP, None) is not None
        if (self.sliding_window is None and not capped) or self.alibi_slopes is not None or kv_cache is None:
            return original(self, query, key, value, kv_cache, attn_metadata, *rest, **kw)
        if attn_metadata.is_prompt:
            if capped:
                return _prefill_by_hand(self, query, key, value, kv_cache, attn_metadata, *rest, **kw)
            return _prefill(original, self, query, key, value, kv_cache, attn_metadata, *rest, **kw)
        return _decode(self, query, key, value, kv_cache, attn_metadata, *rest, **kw)

    forward.compat_windows = True  # type: ignore[attr-defined]
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    return forward


def install(log: Any) -> bool:
    """Wrap the CPU build's attention constructor and forward (once per process). False where the
    engine has no torch_sdpa backend (nothing to teach; the card's backend takes each layer's
    window and cap itself)."""
    import importlib

    try:
        cls = getattr(importlib.import_module(IMPL[0]), IMPL[1])
    except (ImportError, AttributeError):
        log.info("per-layer windows: no %s.%s in this engine; its attention backend receives each layer's window", *IMPL)
        return False
    if getattr(cls.forward, "compat_windows", False):
        return True
    cls.__init__ = _wrap_init(cls.__init__)
    cls.forward = _wrap(cls.forward)
    log.info("per-layer windows: %s.%s masks and decodes each windowed or soft-capped layer by its own window and cap", *IMPL)
    return True
