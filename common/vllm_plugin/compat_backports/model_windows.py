"""A sliding window over the whole model (Mistral 7B v0.1: 4096, Starcoder2: 4096; Phi-3 mini and
medium's 2047 through phi3.py) for the vLLM 0.5.5 generation, through the engine's own classes.

vLLM 0.5.5 has these classes (Mistral is its Llama), and serves a window shorter than
the context differently from the author's transformers once a sequence outgrows it: its block
manager recycles the window's blocks as a ring and its model runner hands each decode the last
window's worth of that ring, block by block, so a decode attends over other positions than the
last `window`. The engine's classes are kept whole here; only the window moves, from the engine
to each layer: R10 switches the engine-wide window off (`use_sliding_window: false`, the
engine's own switch) and these classes build every layer's Attention with the model's window
(windows.py), as the per-layer windows of Gemma 3 and EXAONE 4 are built. The backend then
masks the prefill and reads each decode's last `window` positions exactly (compat_patches/cpu_windows.py
on the CPU build; the card's backend takes the window in its constructor).

Imported inside the engine only, where R10 names the class (a window shorter than the context).
"""

from typing import Any, Optional

from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.starcoder2 import Starcoder2ForCausalLM as EngineStarcoder2

from .layers.windows import layer_cache_config


def model_window(config: Any) -> Optional[int]:
    """The window every layer takes (the author's classes apply it to every layer, whatever else
    the config lists); None where the config names none."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise ValueError(f"model-wide window backport: sliding_window={window!r} is not a window")
    return window


class ModelWindow:
    """Mixed in before an engine class: every layer built with the engine's cache config carrying
    the model's window (the class's layers pass the cache config on to their Attention); the
    engine's cache config as it is where the model has no window."""

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None, **extra: Any):
        window = model_window(config)
        if window is not None:
            cache_config = layer_cache_config(cache_config, window)
        super().__init__(config, cache_config, quant_config, **extra)


class MistralForCausalLM(ModelWindow, LlamaForCausalLM):
    """Mistral 7B v0.1 and its fine-tunes."""


class Starcoder2ForCausalLM(ModelWindow, EngineStarcoder2):
    """Starcoder2 3B, 7B and 15B."""
