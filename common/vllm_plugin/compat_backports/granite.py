"""Granite (`GraniteForCausalLM`, IBM Granite 3.x) for the vLLM 0.5.5 generation, on the shared
decoder (layers/decoder.py).

transformers' modeling_granite.py is the Llama layout with four multipliers from the config: the
input embeddings times `embedding_multiplier`; attention scaled by `attention_multiplier`
instead of 1/sqrt(head_dim); each block's output times `residual_multiplier` before it is added
to the residual stream; the logits divided by `logits_scaling`. Biases follow `attention_bias`
and `mlp_bias`. With the engine's fused residual (RMSNorm adds the residual first), scaling a
block's output before it is handed on is exactly transformers' `residual + output * multiplier`.
"""

from typing import Optional

import torch
from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer, DecoderModel, GatedMLP


class GraniteDecoderLayer(DecoderLayer):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        attention = DecoderAttention(config, cache_config, quant_config, qk_norm=False, scaling=config.attention_multiplier)
        mlp = GatedMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, quant_config, bias=bool(getattr(config, "mlp_bias", False))
        )
        super().__init__(config, cache_config, quant_config, mlp=mlp, attention=attention)
        self.residual_multiplier = config.residual_multiplier

    def branch_out(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.residual_multiplier


class GraniteModel(DecoderModel):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(
            config, cache_config, quant_config, layer_fn=lambda prefix: GraniteDecoderLayer(config, cache_config, quant_config)
        )
        self.embedding_multiplier = config.embedding_multiplier

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids) * self.embedding_multiplier


class GraniteForCausalLM(DecoderForCausalLM):
    model_cls = GraniteModel

    @staticmethod
    def logits_scale(config) -> float:
        return 1.0 / config.logits_scaling
