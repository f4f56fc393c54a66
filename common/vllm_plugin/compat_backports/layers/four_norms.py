"""The decoder layer of Gemma 2, 3 and 4, one for every engine generation: attention and MLP each
between a norm of its input and a norm of its output (transformers' Gemma2/3/4DecoderLayer:
input_layernorm, post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm).

The norms are the family's class (Gemma 2 and 3's GemmaRMSNorm, x * (1 + w); Gemma 4's RMSNorm,
x * w); the attention and the MLP are built by the family module of the engine generation and
handed in, and whatever an attention takes besides the positions and its input passes through
(vLLM 0.5.5's KV cache and metadata; Gemma 4's keys and values of the layers it shares them
with). The residual stream is added here, in transformers' order, instead of being fused into the
next norm as the engines' own Gemma models do (the same sums: the fused norm adds the residual
before it normalizes), so that what a family adds after the MLP (Gemma 4's per-layer input and
layer scalar) has its place.

The layers it is built from (torch modules and the engine's norms) take the same arguments on
vLLM 0.5.5 and on the V1 engine's 0.11: imported by the backports of both.
"""

from typing import Any, Callable

import torch
from torch import nn


class FourNormLayer(nn.Module):
    def __init__(self, hidden_size: int, eps: float, norm_cls: Callable[..., nn.Module], self_attn: nn.Module, mlp: nn.Module) -> None:
        super().__init__()
        self.self_attn, self.mlp = self_attn, mlp
        norm = lambda: norm_cls(hidden_size, eps=eps)  # noqa: E731
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, *attention_args: Any) -> torch.Tensor:
        """The residual stream after attention and MLP (attention_args: what the attention takes
        after the positions and its input)."""
        attn = self.self_attn(positions, self.input_layernorm(hidden_states), *attention_args)
        hidden_states = hidden_states + self.post_attention_layernorm(attn)
        return hidden_states + self.post_feedforward_layernorm(self.feed_forward(hidden_states))

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The MLP branch before its output norm, from the stream after attention (Gemma 4's MoE
        block adds its routed experts here)."""
        return self.mlp(self.pre_feedforward_layernorm(hidden_states))
