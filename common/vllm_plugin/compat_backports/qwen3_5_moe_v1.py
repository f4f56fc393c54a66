"""Qwen3.5's MoE text model (`Qwen3_5MoeForCausalLM`; the published 35B-A3B is
`Qwen3_5MoeForConditionalGeneration`, served as text) for the V1 engine's model API (vLLM 0.11).

The dense backport of this generation (qwen3_5_v1.py: the engine's Qwen3-Next Gated DeltaNet and
gated attention) with the engine's own Qwen3-Next expert block in every layer's place of the MLP
(Qwen3NextSparseMoeBlock: a router without bias, FusedMoE's SiLU experts, a shared expert scaled
by a sigmoid gate, the ranks' sums reduced once), which is transformers 5's Qwen3_5MoeSparseMoeBlock.
One difference: Qwen3.5's router always renormalises its top-k weights, where the engine's block
reads `norm_topk_prob`, a field Qwen3.5's config has not: the block is built from a copy of the
text config that says so. The experts' checkpoint tensors load as Qwen3-MoE's (layers/experts.py,
shared with the 0.5.5 backports); transformers 5's fused experts arrive split by R8's plugin.
"""

import copy
from typing import Any, Iterable, Set, Tuple

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.qwen3_next import Qwen3NextSparseMoeBlock

from .layers.experts import expert_tensors
from .qwen3_5_v1 import Qwen3_5ForCausalLM, Qwen3_5ForConditionalGeneration, Qwen3_5Model


def always_renormalised(config: Any) -> Any:
    """The text config as the engine's expert block reads a router that renormalises its top-k."""
    config = copy.copy(config)
    config.norm_topk_prob = True
    return config


class Qwen3_5MoeModel(Qwen3_5Model):
    def mlp(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        return Qwen3NextSparseMoeBlock(vllm_config, prefix=prefix)


class Qwen3_5MoeForCausalLM(Qwen3_5ForCausalLM):
    model_cls = Qwen3_5MoeModel

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        renormalised = always_renormalised(vllm_config.model_config.hf_config)
        super().__init__(vllm_config=vllm_config.with_hf_config(renormalised), prefix=prefix)

    def expert_weights(self, weights: Iterable[Tuple[str, torch.Tensor]], loaded: Set[str]) -> Iterable[Tuple[str, torch.Tensor]]:
        return expert_tensors(self, self.config.num_experts, weights, loaded)


class Qwen3_5MoeForConditionalGeneration(Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM):
    """Qwen3.5's published MoE checkpoints served as text (the dense one's text loading and tying,
    this class's expert block and expert loading)."""
