"""Qwen3.5's MoE text model (`Qwen3_5MoeForCausalLM`; the published 35B-A3B is
`Qwen3_5MoeForConditionalGeneration`, served as text) for the vLLM 0.5.5 generation.

The dense Qwen3.5 backport (qwen3_5.py: Gated DeltaNet and gated attention layers, the state
pool) with transformers' Qwen3_5MoeSparseMoeBlock in every layer's place of the MLP: a router
(`mlp.gate`, no bias) whose softmax's top `num_experts_per_tok` are always renormalised, SiLU
experts of `moe_intermediate_size`, and a shared expert of `shared_expert_intermediate_size` added
after a sigmoid gate (`mlp.shared_expert_gate`, one output). The routed experts are the engine's
own FusedMoE (the vendor's fused kernel on the card, R11's grouped CPU path on a CPU build),
loaded from the checkpoint's per-expert tensors as the Qwen3-MoE backport loads them.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn
from vllm.config import CacheConfig
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .layers.decoder import GatedMLP
from .qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5Model
from .layers.experts import expert_tensors
from .qwen3_moe import Qwen3MoeSparseBlock


class Qwen3_5MoeSparseBlock(Qwen3MoeSparseBlock):
    """Qwen3-MoE's router and routed experts (always renormalised) plus the gated shared expert."""

    def __init__(self, config, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, quant_config, renormalize=True)
        self.shared_expert = GatedMLP(config.hidden_size, config.shared_expert_intermediate_size, config.hidden_act, quant_config)
        # The shared expert's gate stays unquantized and whole on every rank, as the router.
        self.shared_expert_gate = ReplicatedLinear(config.hidden_size, 1, bias=False, quant_config=None)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        flat = hidden_states.view(-1, hidden_states.shape[-1])
        gate, _ = self.shared_expert_gate(flat)
        shared = torch.sigmoid(gate) * self.shared_expert(flat)
        return super().forward(hidden_states) + shared.view(hidden_states.shape)


class Qwen3_5MoeModel(Qwen3_5Model):
    def _layer(self, config, index: int, cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]) -> nn.Module:
        mlp = Qwen3_5MoeSparseBlock(config, quant_config)
        return Qwen3_5DecoderLayer(config, index, self.state_index.get(index), cache_config, quant_config, mlp=mlp)


class Qwen3_5MoeForCausalLM(Qwen3_5ForCausalLM):
    model_cls = Qwen3_5MoeModel

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(expert_tensors(self, self.config.num_experts, weights))


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM):
    """Qwen3.5's published MoE checkpoints served as text (the dense one's text loading and tying,
    this class's expert block and expert loading)."""
