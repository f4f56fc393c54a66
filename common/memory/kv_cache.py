"""What the KV cache of one request takes, from config.json and the engine's own rules.

Each decoder layer is one of: full attention (every token: 2 x KV heads x head size per token,
GQA's KV heads split across tensor-parallel ranks, at least one each), a sliding window or an
attention chunk (only the window's tokens, where the engine knows windows), MLA (one latent of
kv_lora_rank + qk_rope_head_dim per token, not split across ranks, where the engine caches it
so), a linear-attention or state-space layer (one fixed state per sequence), or none. How the
engine then refuses a --max-model-len is profile fact `memory.kv_check`, read from its source:

  pages   (vLLM 0.11, V1) the sum over the layers of what one request of max_model_len takes,
          each in whole pages of block_size tokens (check_enough_kv_cache_memory): a full layer
          cdiv(len, block) pages; a window layer cdiv(min(window - 1 + batched tokens, len),
          block) + 1; a chunked layer cdiv(min(chunk + batched tokens, len), block); a
          linear layer its one state. Refused when that exceeds the KV space.
  blocks  (vLLM 0.5.5) whole blocks of block_size tokens over every layer (windows and MLA
          cached as full layers, DeepSeek-V2's heads padded to the profile's size): refused
          when max_model_len exceeds block_size x floor(KV space / block bytes), or when not
          one block fits ("No available memory for the cache blocks").
"""

from __future__ import annotations

from ..model.headsize import attention_config, detect_head_size
from ..model.json_numbers import positive_int
from .memory_tables import (
    FALCON_TYPES,
    FP8_DS_MLA,
    FP8_DS_MLA_TOKEN_BYTES,
    GATED_DELTA_NET,
    HEAD_KEYS,
    INTERLEAVED_UNKNOWN,
    KV_HEAD_KEYS,
    LAYER_KEYS,
    LAYER_TYPE_KINDS,
    LIGHTNING_STATE_BYTES,
    LIGHTNING_TYPES,
    MAMBA1,
    MAMBA2,
    PATTERN_KINDS,
    WINDOW_PERIODS,
)

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple


def _first(cfg: Dict[str, Any], keys: Sequence[str]) -> Optional[int]:
    return next((positive_int(cfg.get(k)) for k in keys if positive_int(cfg.get(k))), None)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


class Layout:
    """The KV cache of one model as the engine keeps it: a kind per decoder layer ("full",
    "window", "chunked", "linear", "none"), the window or chunk of each windowed layer, the
    KV heads and head size of an attention layer, MLA's latent size (None: not MLA), and the
    state of a linear layer per sequence as (elements split across ranks, elements not split,
    bytes per element or None for the KV dtype)."""

    def __init__(self, kinds: List[str], spans: List[int], kv_heads: int, head_size: int) -> None:
        self.kinds, self.spans, self.kv_heads, self.head_size = kinds, spans, kv_heads, head_size
        # Each layer's (head size, KV heads) where the engine keeps a KV cache of its own shape
        # per layer (a V1 backport's layers of several head sizes); empty: one shape for all.
        self.per_layer: List[Tuple[int, int]] = []
        self.latent: Optional[int] = None
        self.state: Tuple[int, int, Optional[int]] = (0, 0, None)
        self.notes: List[str] = []

    @property
    def layers(self) -> int:
        return len(self.kinds)

    def token_bytes(self, tp: int, kv_bytes: int, start: int = 0, end: Optional[int] = None, kv_dtype: str = "auto") -> int:
        """Bytes one token takes in the layers [start, end) that cache every token (full,
        window, chunked) on one tensor-parallel rank: what a whole sequence costs per token
        where windows are not kept apart."""
        end = self.layers if end is None else end
        cached = (i for i in range(start, end) if self.kinds[i] in ("full", "window", "chunked"))
        return sum(self.layer_token_bytes(tp, kv_bytes, kv_dtype, i) for i in cached)

    def layer_token_bytes(self, tp: int, kv_bytes: int, kv_dtype: str = "auto", layer: Optional[int] = None) -> int:
        """Bytes one token takes in one layer on one rank (`layer`: which, where layers differ)."""
        if self.latent is not None:
            return FP8_DS_MLA_TOKEN_BYTES if kv_dtype == FP8_DS_MLA else self.latent * kv_bytes
        head, kv = self.per_layer[layer] if self.per_layer and layer is not None else (self.head_size, self.kv_heads)
        return 2 * max(1, kv // tp) * head * kv_bytes

    def state_bytes(self, tp: int, kv_bytes: int) -> int:
        split, whole, size = self.state
        return (cdiv(split, tp) + whole) * (size or kv_bytes)


def layout(
    config: Dict[str, Any],
    facts: Mapping[str, Any],
    disable_window: bool = False,
    env: Optional[Mapping[str, str]] = None,
    per_layer: Optional[List[Tuple[int, int]]] = None,
) -> Optional[Layout]:
    """The model's KV layout on an engine with memory facts `facts`; None when the config
    states no layers or heads. `disable_window`: every windowed layer keeps every token
    (--disable-sliding-window; the V1 engine's hybrid KV cache manager off); `per_layer`: each
    layer's (head size, KV heads) where the engine keeps each layer's cache at its own."""
    _, cfg = attention_config(config)
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    layers = _first(cfg, LAYER_KEYS)
    heads = _first(cfg, HEAD_KEYS)
    if layers is None or heads is None:
        return None
    kinds, spans = layer_kinds(cfg, model_type, layers)
    if not facts.get("window_layers") or disable_window:
        # 0.5.5 keeps every token of a windowed layer; --disable-sliding-window drops windows; the
        # V1 engine without its hybrid manager keeps every token and attends over the window.
        kinds = ["full" if k in ("window", "chunked") else k for k in kinds]
    if not facts.get("linear_state") and any(k == "linear" for k in kinds):
        kinds = ["none" if k == "linear" else k for k in kinds]
    padded = (facts.get("padded_head_sizes") or {}).get(model_type)
    head = detect_head_size(config).value
    result = Layout(kinds, spans, total_kv_heads(cfg, model_type, heads), padded or head or 0)
    if per_layer and len(per_layer) == len(kinds):
        result.per_layer = list(per_layer)
    mla = facts.get("mla_latent") and model_type in (facts.get("mla_model_types") or ()) and positive_int(cfg.get("kv_lora_rank"))
    if mla and (env or {}).get("VLLM_MLA_DISABLE", "").strip() not in ("1", "true", "True"):
        result.latent = int(cfg["kv_lora_rank"]) + (positive_int(cfg.get("qk_rope_head_dim")) or 0)
        result.kv_heads = 1
    if result.head_size <= 0 and result.latent is None:
        return None
    result.state = linear_state(cfg, model_type)
    if model_type in INTERLEAVED_UNKNOWN and "layer_types" not in cfg and facts.get("window_layers"):
        result.notes.append(f"{model_type}: which layers are windowed is not stated; every layer counted as global")
    return result


def total_kv_heads(cfg: Dict[str, Any], model_type: str, heads: int) -> int:
    """The engine's get_total_num_kv_heads: Falcon's multi-query, MPT/DBRX's attn_config,
    then the GQA keys, else every attention head."""
    if cfg.get("multi_query") and not (model_type in FALCON_TYPES and cfg.get("new_decoder_architecture")):
        return 1
    attn = cfg.get("attn_config")
    if model_type in ("mpt", "dbrx") and isinstance(attn, dict):
        return positive_int(attn.get("kv_n_heads")) or heads
    return _first(cfg, KV_HEAD_KEYS) or heads


def layer_kinds(cfg: Dict[str, Any], model_type: str, layers: int) -> Tuple[List[str], List[int]]:
    """(a kind per layer, the window or chunk of each layer, 0 where none), from the keys
    hybrid and windowed configs state their layers with."""
    kinds = ["full"] * layers
    types = cfg.get("layer_types")
    pattern = cfg.get("hybrid_override_pattern")
    block_types = cfg.get("layers_block_type")
    attn_types = cfg.get("attn_type_list")
    if isinstance(types, list) and len(types) >= layers:
        kinds = [LAYER_TYPE_KINDS.get(str(t), "full") for t in types[:layers]]
    elif isinstance(pattern, str) and len(pattern) >= layers:
        kinds = [PATTERN_KINDS.get(c, "full") for c in pattern[:layers]]
    elif isinstance(block_types, list) and len(block_types) >= layers:
        kinds = [LAYER_TYPE_KINDS.get(str(t), "full") for t in block_types[:layers]]
    elif isinstance(attn_types, list) and len(attn_types) >= layers:
        kinds = ["full" if t == 1 else "linear" for t in attn_types[:layers]]
    elif positive_int(cfg.get("attn_layer_period")):
        period, offset = int(cfg["attn_layer_period"]), int(cfg.get("attn_layer_offset") or 0)
        kinds = ["full" if i % period == offset else "linear" for i in range(layers)]
    elif positive_int(cfg.get("full_attention_interval")):
        interval = int(cfg["full_attention_interval"])
        kinds = ["full" if (i + 1) % interval == 0 else "linear" for i in range(layers)]
    window = positive_int(cfg.get("sliding_window")) if cfg.get("use_sliding_window") is not False else None
    chunk = positive_int(cfg.get("attention_chunk_size"))
    if window is not None and not any(k == "window" for k in kinds) and not isinstance(types, list):
        period = positive_int(cfg.get("sliding_window_pattern")) or WINDOW_PERIODS.get(model_type)
        if period:
            kinds = ["window" if k == "full" and (i + 1) % period else k for i, k in enumerate(kinds)]
        elif model_type not in INTERLEAVED_UNKNOWN:
            kinds = ["window" if k == "full" else k for k in kinds]
    if chunk is not None and not any(k == "chunked" for k in kinds) and not isinstance(types, list):
        # Llama 4: the layers with rope attend in chunks, its NoPE layers (no_rope_layers 0) globally.
        rope = cfg.get("no_rope_layers")
        uses_rope = rope if isinstance(rope, list) and len(rope) >= layers else [1] * layers
        kinds = ["chunked" if k == "full" and uses_rope[i] else k for i, k in enumerate(kinds)]
    spans = [(window or 0) if k == "window" else (chunk or 0) if k == "chunked" else 0 for k in kinds]
    kinds = ["full" if k in ("window", "chunked") and not s else k for k, s in zip(kinds, spans, strict=True)]
    return kinds, spans


def linear_state(cfg: Dict[str, Any], model_type: str) -> Tuple[int, int, Optional[int]]:
    """One linear layer's state per sequence: (elements split across tensor-parallel ranks,
    elements every rank holds, bytes per element or None for the KV dtype)."""

    def get(table: Dict[str, Tuple[str, ...]], name: str) -> Optional[int]:
        return _first(cfg, table[name])

    if get(GATED_DELTA_NET, "v_heads"):
        kh, vh = get(GATED_DELTA_NET, "k_heads") or 0, get(GATED_DELTA_NET, "v_heads") or 0
        kd, vd, conv = get(GATED_DELTA_NET, "k_dim") or 0, get(GATED_DELTA_NET, "v_dim") or 0, get(GATED_DELTA_NET, "conv") or 1
        return (conv - 1) * (2 * kh * kd + vh * vd) + vh * kd * vd, 0, None
    if get(MAMBA2, "heads") and get(MAMBA2, "head_dim"):
        heads, dim, state = get(MAMBA2, "heads") or 0, get(MAMBA2, "head_dim") or 0, get(MAMBA2, "state") or 0
        groups, conv = get(MAMBA2, "groups") or 1, get(MAMBA2, "conv") or 1
        inner = heads * dim
        return (conv - 1) * (inner + 2 * groups * state) + heads * dim * state, 0, None
    if model_type in LIGHTNING_TYPES:
        heads, dim = _first(cfg, HEAD_KEYS) or 0, positive_int(cfg.get("head_dim")) or 0
        return heads * dim * dim, 0, LIGHTNING_STATE_BYTES
    if get(MAMBA1, "state"):
        hidden = positive_int(cfg.get("hidden_size")) or 0
        inner = positive_int(cfg.get("mamba_intermediate_size")) or (get(MAMBA1, "expand") or 2) * hidden
        conv = get(MAMBA1, "conv") or 1
        return (conv - 1) * inner + inner * (get(MAMBA1, "state") or 0), 0, None
    return 0, 0, None


def pp_stages(layers: int, pp: int, kv_check: str) -> List[Tuple[int, int]]:
    """The [start, end) decoder layers of each pipeline stage, as the engine splits them:
    0.5.5 gives the remainder to the last stage, V1 to the stages before it."""
    pp = max(1, min(pp, layers))
    per = layers // pp
    sizes = [per] * pp
    rest = layers % pp
    if kv_check == "blocks":
        sizes[-1] += rest
    else:
        for i in range(2, rest + 2):
            sizes[-i] += 1
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out


class Budget:
    """What one request's KV cache of `length` tokens needs on one rank of one stage, by the
    engine's rule (`check`), in bytes."""

    def __init__(self, lay: Layout, check: str, block: int, tp: int, kv_bytes: int, kv_dtype: str, batched: int) -> None:
        self.lay, self.check, self.block, self.tp, self.kv_bytes, self.kv_dtype, self.batched = (
            lay,
            check,
            block,
            tp,
            kv_bytes,
            kv_dtype,
            batched,
        )

    def needed(self, length: int, stage: Tuple[int, int]) -> int:
        start, end = stage
        lay = self.lay
        if self.check == "blocks":
            page = self.block * lay.layer_token_bytes(self.tp, self.kv_bytes, self.kv_dtype)
            return cdiv(length, self.block) * page * sum(1 for k in lay.kinds[start:end] if k != "none" and k != "linear")
        total = 0
        for i in range(start, end):
            kind, span = lay.kinds[i], lay.spans[i]
            page = self.block * lay.layer_token_bytes(self.tp, self.kv_bytes, self.kv_dtype, i)
            if kind == "full":
                total += cdiv(length, self.block) * page
            elif kind == "window":
                total += (cdiv(min(span - 1 + self.batched, length), self.block) + 1) * page
            elif kind == "chunked":
                total += cdiv(min(span + self.batched, length), self.block) * page
            elif kind == "linear":
                total += lay.state_bytes(self.tp, self.kv_bytes)
        return total

    def block_bytes(self, stage: Tuple[int, int]) -> int:
        """0.5.5's cache block: block_size tokens of every cached layer of the stage."""
        start, end = stage
        return (
            self.block
            * self.lay.layer_token_bytes(self.tp, self.kv_bytes, self.kv_dtype)
            * sum(1 for k in self.lay.kinds[start:end] if k not in ("none", "linear"))
        )

    def refuses(self, length: int, stage: Tuple[int, int], space: int) -> bool:
        """Whether the engine refuses one request of `length` tokens in `space` bytes."""
        if space <= 0:
            return True
        if self.check == "blocks":
            size = self.block_bytes(stage)
            blocks = space // size if size else 1 << 62
            return blocks <= 0 or length > self.block * blocks
        return self.needed(length, stage) > space
