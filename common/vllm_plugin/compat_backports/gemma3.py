"""Gemma 3's text model (`Gemma3ForCausalLM`) for the vLLM 0.5.5 generation, from that engine's layers.

Gemma 3 is the engine's Gemma 2 layout (transformers' modeling_gemma3.py): embeddings scaled by
sqrt(hidden_size) in the weights' dtype, Gemma's RMSNorm (x * (1 + w)), a norm before and after
each of attention and MLP (four_norms.py, with Gemma 4's), a tanh-GELU gated MLP, scaling by query_pre_attn_scalar, tied
embeddings; plus per-head q/k norms (Gemma's RMSNorm) and two kinds of layers: local ones with a
sliding window and their own rope base (`rope_local_base_freq`, unscaled), global ones with
`rope_theta` and the model's rope scaling (linear x8 in the 4B and larger). Each layer's window
reaches the engine's Attention through windows.py (the engine-wide window is off: R10). No logit
soft-capping in published Gemma 3 (Gemma 2's final one is kept where a config sets it).
The 4B-27B checkpoints are `Gemma3ForConditionalGeneration` (text and vision): served as text,
their language model's weights under either published naming, the vision tensors skipped.
"""

from typing import List, Optional

import torch
from torch import nn
from vllm.attention import AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_pp_group
from vllm.model_executor.layers.layernorm import GemmaRMSNorm
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.sequence import IntermediateTensors

from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderModel, GatedMLP, layer_index
from .layers.four_norms import FourNormLayer
from .layers.text_of_vlm import ServedAsText
from .layers.windows import layer_cache_config, layer_windows


class Gemma3Attention(DecoderAttention):
    norm_cls = GemmaRMSNorm


class Gemma3DecoderLayer(FourNormLayer):
    def __init__(
        self, config, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> None:
        attention = self.make_attention(config, window, layer_cache_config(cache_config, window), quant_config)
        mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_activation, quant_config)
        super().__init__(config.hidden_size, config.rms_norm_eps, GemmaRMSNorm, attention, mlp)

    def make_attention(
        self, config, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        """(Called before the module is set up: it reads only its arguments.)"""
        if window is None:
            rope = (config.rope_theta, getattr(config, "rope_scaling", None))
        else:
            rope = (config.rope_local_base_freq, None)  # local layers: their own base, never scaled
        return Gemma3Attention(config, cache_config, quant_config, scaling=config.query_pre_attn_scalar**-0.5, rope=rope)


class Gemma3Model(DecoderModel):
    """Gemma 4 builds on it with its own layers (`make_layer`) and norm class (`norm_cls`)."""

    norm_cls = GemmaRMSNorm

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        windows = layer_windows(config)

        def layer(prefix: str) -> nn.Module:
            index = layer_index(prefix)
            return self.make_layer(config, index, windows[index], cache_config, quant_config)

        super().__init__(config, cache_config, quant_config, layer_fn=layer)
        self.norm = self.norm_cls(config.hidden_size, eps=config.rms_norm_eps)
        # transformers multiplies by the scale cast to the weights' dtype (bf16 rounds sqrt(hidden)).
        self.register_buffer("normalizer", torch.tensor(config.hidden_size**0.5), persistent=False)

    def make_layer(
        self, config, index: int, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        return Gemma3DecoderLayer(config, window, cache_config, quant_config)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids)
        return embeds * self.normalizer.to(embeds.dtype)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: List[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate_tensors: Optional[IntermediateTensors] = None,
    ):
        # The layers carry the whole residual stream (four_norms.py): no separate residual.
        hidden_states = self.embed(input_ids) if get_pp_group().is_first_rank else intermediate_tensors["hidden_states"]
        for i in range(self.start_layer, self.end_layer):
            hidden_states = self.layers[i](positions, hidden_states, kv_caches[i - self.start_layer], attn_metadata)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states})
        return self.norm(hidden_states)


class Gemma3ForCausalLM(DecoderForCausalLM):
    model_cls = Gemma3Model

    @staticmethod
    def check_config(config) -> None:
        if getattr(config, "use_bidirectional_attention", False):
            raise ValueError("Gemma 3 backport: bidirectional attention (EmbeddingGemma) is not a causal LM")
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise ValueError("Gemma 3 backport: attention logit soft-capping is not supported on this engine's CPU attention")
        layer_windows(config)  # refuses layer types and windows it cannot serve

    def make_logits_processor(self, config) -> LogitsProcessor:
        return LogitsProcessor(config.vocab_size, soft_cap=getattr(config, "final_logit_softcapping", None))

    def make_empty_intermediate_tensors(self, batch_size: int, dtype: torch.dtype, device: torch.device) -> IntermediateTensors:
        # The layers pass the whole residual stream: no separate residual.
        return IntermediateTensors({"hidden_states": torch.zeros((batch_size, self.config.hidden_size), dtype=dtype, device=device)})


class Gemma3ForConditionalGeneration(ServedAsText, Gemma3ForCausalLM):
    """Gemma 3 4B-27B served as text."""
