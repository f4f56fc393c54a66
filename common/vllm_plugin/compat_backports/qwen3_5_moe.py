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
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .qwen3 import Qwen3MLP
from .qwen3_5 import Qwen3_5DecoderLayer, Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5Model
from .qwen3_moe import expert_tensors


class Qwen3_5MoeSparseBlock(nn.Module):
    def __init__(self, config, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__()
        # The router and the shared expert's gate stay unquantized and whole on every rank.
        self.gate = ReplicatedLinear(config.hidden_size, config.num_experts, bias=False, quant_config=None)
        self.experts = FusedMoE(
            num_experts=config.num_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            reduce_results=True,
            renormalize=True,
            quant_config=quant_config,
        )
        self.shared_expert = Qwen3MLP(config.hidden_size, config.shared_expert_intermediate_size, config.hidden_act, quant_config)
        self.shared_expert_gate = ReplicatedLinear(config.hidden_size, 1, bias=False, quant_config=None)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        hidden_states = hidden_states.view(-1, shape[-1])
        router_logits, _ = self.gate(hidden_states)
        routed = self.experts(hidden_states=hidden_states, router_logits=router_logits)
        gate, _ = self.shared_expert_gate(hidden_states)
        return (routed + torch.sigmoid(gate) * self.shared_expert(hidden_states)).view(shape)


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
