"""Phi-3 (`Phi3ForCausalLM`) for the vLLM 0.5.5 generation, over the engine's own class: its
window handed to each layer, and a rotary that turns only the rotary fraction of each head.

vLLM 0.5.5 serves Phi-3 as its Llama class, which (1) reads a window shorter than the context
block by block in decode (model_windows.py says how; Phi-3 mini and medium 4k: 2047), and (2)
rotates every dimension of each head: a partial rotary factor (Phi-4-mini: 0.75) is dropped, and
with LongRoPE, whose factors cover the rotary fraction only, the model is refused ("The size of
tensor a (24) must match the size of tensor b (32)"). transformers' modeling_phi3.py rotates the
first `head_dim * partial_rotary_factor` dimensions (the halves rotated within them, as the
engine's neox style) and passes the rest; LongRoPE's short and long factors and its attention
scaling (sqrt(1 + log(scale) / log(original positions)), on cos and sin) are the engine's own
LongRoPE over that fraction. The engine's Llama is built with no rope scaling (its LongRoPE would
refuse the fraction's factors), then each layer's rotary is replaced by the fraction's; the rest
of the model is the engine's.

Imported inside the engine only, where R10 names the class (a window shorter than the context,
or a partial rotary factor).
"""

import copy
from typing import Any, Optional

import torch
from torch import nn
from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.models.llama import LlamaForCausalLM

from .model_windows import ModelWindow


class PartialRotary(nn.Module):
    """The first `rotary_dim` dimensions of each head rotated by `inner` (a rotary built for heads
    of that size), the others passed through, as transformers' apply_rotary_pos_emb."""

    def __init__(self, inner: nn.Module, head_size: int, rotary_dim: int) -> None:
        super().__init__()
        self.inner, self.head_size, self.rotary_dim = inner, head_size, rotary_dim

    def forward(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor, offsets: Optional[torch.Tensor] = None):
        q = query.view(*query.shape[:-1], -1, self.head_size)
        k = key.view(*key.shape[:-1], -1, self.head_size)
        rd = self.rotary_dim
        q_rot, k_rot = self.inner(positions, q[..., :rd].reshape(*q.shape[:-2], -1), k[..., :rd].reshape(*k.shape[:-2], -1), offsets)
        q = torch.cat([q_rot.view(*q.shape[:-1], rd), q[..., rd:]], dim=-1)
        k = torch.cat([k_rot.view(*k.shape[:-1], rd), k[..., rd:]], dim=-1)
        return q.flatten(-2), k.flatten(-2)


def rotary_fraction(config: Any) -> float:
    factor = getattr(config, "partial_rotary_factor", None)
    if factor is None:
        return 1.0
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise ValueError(f"Phi-3 backport: partial_rotary_factor={factor!r} is not a fraction in (0, 1]")
    return float(factor)


class Phi3ForCausalLM(ModelWindow, LlamaForCausalLM):
    """Phi-3 mini and medium, Phi-3.5 mini, Phi-4-mini: fused qkv and gate-up weights, as the
    engine's Llama loads them."""

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None, **extra: Any):
        fraction = rotary_fraction(config)
        if fraction == 1.0:
            super().__init__(config, cache_config, quant_config, **extra)
            return
        plain = copy.copy(config)
        plain.rope_scaling = None  # the engine's LongRoPE refuses factors for a fraction of the head
        super().__init__(plain, cache_config, quant_config, **extra)
        self.config = config
        head_size = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        rotary_dim = int(head_size * fraction)
        rope_scaling = dict(config.rope_scaling) if getattr(config, "rope_scaling", None) else None
        if rope_scaling is not None and getattr(config, "original_max_position_embeddings", None):
            rope_scaling["original_max_position_embeddings"] = config.original_max_position_embeddings  # as the engine's Llama does
        inner = get_rope(
            rotary_dim,
            rotary_dim=rotary_dim,
            max_position=getattr(config, "max_position_embeddings", 8192),
            base=getattr(config, "rope_theta", 10000),
            rope_scaling=rope_scaling,
        )
        rotary = PartialRotary(inner, head_size, rotary_dim)
        for layer in self.model.layers:
            attn = getattr(layer, "self_attn", None)  # a pipeline stage's missing layers have none
            if attn is not None:
                attn.rotary_emb = rotary
