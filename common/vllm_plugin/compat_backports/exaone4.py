"""EXAONE 4 (`Exaone4ForCausalLM`) for the vLLM 0.5.5 generation, on OLMo 2's layer and the shared
decoder's attention (layers/decoder.py).

transformers' modeling_exaone4.py is OLMo 2's post-norm layer (no norm before the blocks; each
block's output normalized before it joins the residual stream) with Qwen3's attention (q and k
normalized per head, one weight of head_dim). What is its own: the 32B alternates windowed layers
(`layer_types`, `sliding_window`; a token sees the last `sliding_window` positions, itself
included) with global layers that take no rotary embedding; a config without a window (the
1.2B) rotates on every layer. Each windowed layer gets its own window through the cache config its
Attention is built with (windows.py); the engine-wide window must then be off.
"""

from typing import Optional

from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .olmo2 import Olmo2DecoderLayer
from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderModel, layer_index
from .layers.windows import layer_cache_config, layer_windows


class Exaone4Model(DecoderModel):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        windows = layer_windows(config)
        # transformers tests the config's window, not the layer's: with one, only windowed layers rotate.
        rope_everywhere = getattr(config, "sliding_window", None) is None

        def layer(prefix: str) -> Olmo2DecoderLayer:
            window = windows[layer_index(prefix)]
            attention = DecoderAttention(
                config, layer_cache_config(cache_config, window), quant_config, rotate=rope_everywhere or window is not None
            )
            return Olmo2DecoderLayer(config, cache_config, quant_config, attention=attention)

        super().__init__(config, cache_config, quant_config, layer_fn=layer)


class Exaone4ForCausalLM(DecoderForCausalLM):
    model_cls = Exaone4Model

    @staticmethod
    def check_config(config) -> None:
        layer_windows(config)  # refuses layer types and windows it cannot serve
