"""Sliding windows per layer on vLLM 0.5.5, whose attention takes one window per model.

The engine reads a model-wide window from config.json (`sliding_window`, unless
`use_sliding_window` is false) into its cache config; every Attention layer built with that
cache config gets it, the block manager recycles blocks outside it and the model runner cuts each
decode's context to it. A model whose layers alternate local windows and global attention (Gemma
3, EXAONE 4's hybrid) is served right only when the engine-wide window is off (R10 edits
`use_sliding_window: false` into the config the engine reads, the engine's own switch) and each
windowed layer hands its own window to the engine's Attention: the only per-layer way 0.5.5's
layer API has is the cache config that layer is built with. The backend then receives the window
in its constructor, as any model's window reaches it (compat_patches/cpu_windows.py makes the CPU build's
backend honour it per layer, in prefill and decode).

Imported inside the engine only, by the backports that have windowed layers.
"""

from __future__ import annotations

import copy
from typing import Any, List, Optional

SLIDING = "sliding_attention"
FULL = "full_attention"


def layer_windows(config: Any) -> List[Optional[int]]:
    """Each layer's window (None: global), from the config's `layer_types` and `sliding_window`.

    transformers 5 and 4.55 both write `layer_types` for these families; a type other than the
    two is refused rather than guessed (a window silently dropped serves wrong tokens)."""
    n = config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    types = list(getattr(config, "layer_types", None) or [FULL] * n)
    if len(types) != n:
        raise ValueError(f"backport: layer_types has {len(types)} entries for {n} layers")
    unknown = sorted({t for t in types if t not in (SLIDING, FULL)})
    if unknown:
        raise ValueError(f"backport: layer types {unknown} are not supported on this engine")
    if SLIDING in types and not (isinstance(window, int) and window > 0):
        raise ValueError(f"backport: sliding layers with sliding_window={window!r}")
    return [window if t == SLIDING else None for t in types]


def layer_cache_config(cache_config: Any, window: Optional[int]) -> Any:
    """The cache config one layer's Attention is built with: the engine's, carrying `window`."""
    if cache_config is None:
        if window is not None:
            # 0.5.5's Attention reads the window only from a cache config; without one it would be dropped.
            raise ValueError("backport: a windowed layer needs the engine's cache config")
        return None
    if getattr(cache_config, "sliding_window", None) is not None:
        # The engine-wide window is on (R10's config edit did not reach the engine): global layers
        # would be served windowed, the block manager would recycle blocks of every layer's context
        # and the runner would cut each decode's context, which a windowed layer's decode (counting
        # positions from the sequence's length) must not meet either.
        raise ValueError(
            f"backport: the engine applies a model-wide window ({cache_config.sliding_window}) to every layer; "
            "its config must say use_sliding_window: false"
        )
    layer = copy.copy(cache_config)
    layer.sliding_window = window
    return layer
