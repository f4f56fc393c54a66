"""Gemma 2 (`Gemma2ForCausalLM`) for the vLLM 0.5.5 generation, with its sliding windows.

vLLM 0.5.5 has Gemma 2 without its windows: it serves every layer globally and caps the context
to the window ("Gemma 2 uses sliding window attention for every odd layer, which is currently not
supported by vLLM"), so the platform's usual --max-model-len 8192 is refused on Gemma 2's 4096
window. Gemma 2 is Gemma 3's layout (gemma3.py; transformers' modeling_gemma2.py) less the
per-head q/k norms, with one rope base for every layer and its attention scores soft-capped
(cap * tanh(scores / cap), attn_logit_softcapping) before the mask; its layers alternate a window
and global attention (`layer_types`). Served by Gemma 3's classes with those differences: each
windowed layer hands its window to the engine's Attention (windows.py, the engine-wide window
off: R10, which also lifts the engine's cap of the context), every layer its soft cap (the
engine's Attention takes `logits_soft_cap`; compat_patches/cpu_windows.py applies it on the CPU build),
and the final logits keep their own cap.
"""

from typing import Optional

from torch import nn
from vllm.attention import Attention
from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .gemma3 import Gemma3Attention, Gemma3DecoderLayer, Gemma3ForCausalLM, Gemma3Model
from .layers.windows import FULL, SLIDING, layer_windows


class Gemma2Attention(Gemma3Attention):
    def make_attn(self, config, scale: float, cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]) -> Attention:
        return Attention(
            self.num_heads,
            self.head_dim,
            scale,
            num_kv_heads=self.num_kv_heads,
            cache_config=cache_config,
            quant_config=quant_config,
            logits_soft_cap=getattr(config, "attn_logit_softcapping", None),
        )


class Gemma2DecoderLayer(Gemma3DecoderLayer):
    def make_attention(
        self, config, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        # One rope base for every layer, windowed or not.
        return Gemma2Attention(
            config, cache_config, quant_config, qk_norm=False, scaling=config.query_pre_attn_scalar**-0.5, rope=(config.rope_theta, None)
        )


class Gemma2Model(Gemma3Model):
    def make_layer(
        self, config, index: int, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        return Gemma2DecoderLayer(config, window, cache_config, quant_config)


class Gemma2ForCausalLM(Gemma3ForCausalLM):
    model_cls = Gemma2Model

    @staticmethod
    def check_config(config) -> None:
        if not getattr(config, "layer_types", None):
            # The transformers before layer_types windowed the even layers (modeling_gemma2.py's
            # `not bool(layer_idx % 2)`); the engine's 4.55 writes that list itself.
            config.layer_types = [SLIDING if i % 2 == 0 else FULL for i in range(config.num_hidden_layers)]
        layer_windows(config)  # refuses layer types and windows it cannot serve
