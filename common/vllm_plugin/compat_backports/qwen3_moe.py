"""Qwen3-MoE (`Qwen3MoeForCausalLM`) for the vLLM 0.5.5 generation: the Qwen3 backport's attention
and decoder layer with a sparse expert block in place of the MLP.

transformers' modeling_qwen3_moe.py: a router (`mlp.gate`, no bias) picks `num_experts_per_tok`
experts per token from a softmax over `num_experts`; the picked weights are renormalized only when
`norm_topk_prob`; each expert is a SiLU MLP of `moe_intermediate_size` (`mlp.experts.{e}.gate_proj`
/ `up_proj` / `down_proj`), no shared expert. A layer is sparse when it is not in `mlp_only_layers`
and (index + 1) is a multiple of `decoder_sparse_step`; the others have a dense MLP of
`intermediate_size`.

The experts run in plain torch through the engine's linear layers, every expert over every token
weighted by a dense routing matrix, as the engine's own mixtral_quant.py does: no fused-MoE
kernel (vLLM 0.5.5's CPU backend has none), and static shapes, so CUDA graph capture holds. An
expert is the Qwen3 MLP, so its checkpoint names stack as the dense model's do (the names R8's
plugin writes when transformers 5 stored the experts fused).
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from vllm.config import CacheConfig
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .qwen3 import Qwen3DecoderLayer, Qwen3ForCausalLM, Qwen3MLP, Qwen3Model


class Qwen3MoeSparseBlock(nn.Module):
    def __init__(self, config, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = bool(getattr(config, "norm_topk_prob", False))
        # The router stays unquantized and whole on every rank, as in the engine's MoE models.
        self.gate = ReplicatedLinear(config.hidden_size, config.num_experts, bias=False, quant_config=None)
        self.experts = nn.ModuleList(
            Qwen3MLP(config.hidden_size, config.moe_intermediate_size, config.hidden_act, quant_config) for _ in range(config.num_experts)
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        hidden_states = hidden_states.view(-1, shape[-1])
        router_logits, _ = self.gate(hidden_states)
        weights = F.softmax(router_logits, dim=-1, dtype=torch.float)
        weights, chosen = torch.topk(weights, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(hidden_states.dtype)
        out = torch.zeros_like(hidden_states)
        for index, expert in enumerate(self.experts):
            # Each token's weight for this expert (0 where it was not picked): no data-dependent shape.
            weight = (weights * (chosen == index)).sum(dim=-1, keepdim=True)
            out = out + expert(hidden_states) * weight
        return out.view(shape)


def sparse(config, index: int) -> bool:
    """Whether layer `index` has the expert block (transformers' Qwen3MoeDecoderLayer)."""
    only_mlp = getattr(config, "mlp_only_layers", None) or ()
    step = getattr(config, "decoder_sparse_step", 1) or 1
    return index not in only_mlp and config.num_experts > 0 and (index + 1) % step == 0


class Qwen3MoeModel(Qwen3Model):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        def layer(prefix: str) -> Qwen3DecoderLayer:
            index = int(prefix.rsplit(".", 1)[1])
            mlp = Qwen3MoeSparseBlock(config, quant_config) if sparse(config, index) else None
            return Qwen3DecoderLayer(config, cache_config, quant_config, mlp=mlp)

        super().__init__(config, cache_config, quant_config, layer_fn=layer)


class Qwen3MoeForCausalLM(Qwen3ForCausalLM):
    model_cls = Qwen3MoeModel
