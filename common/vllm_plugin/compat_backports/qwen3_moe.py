"""Qwen3-MoE (`Qwen3MoeForCausalLM`) for the vLLM 0.5.5 generation: the shared decoder's attention
and layer with their Qwen3 defaults (layers/decoder.py), a sparse expert block in place of the MLP.

transformers' modeling_qwen3_moe.py: a router (`mlp.gate`, no bias) picks `num_experts_per_tok`
experts per token from a softmax over `num_experts`; the picked weights are renormalized only when
`norm_topk_prob`; each expert is a SiLU MLP of `moe_intermediate_size` (`mlp.experts.{e}.gate_proj`
/ `up_proj` / `down_proj`), no shared expert. A layer is sparse when it is not in `mlp_only_layers`
and (index + 1) is a multiple of `decoder_sparse_step`; the others have a dense MLP of
`intermediate_size`.

The experts are the engine's own FusedMoE layer, as its Mixtral and Qwen2-MoE are built: on the
card the vendor's fused kernel runs them (only the picked experts, one all-reduce per block under
tensor parallelism); its loader stacks each expert's checkpoint tensors into the layer's fused
weights (FusedMoE.make_expert_params_mapping). A CPU build of the engine has no CPU path for that
layer; R11 gives it one (the experts grouped by token). The checkpoint names are the ones R8's
plugin writes when transformers 5 stored the experts fused.
"""

from typing import Iterable, Optional, Tuple

import torch
from torch import nn
from vllm.config import CacheConfig
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .layers.decoder import DecoderForCausalLM, DecoderLayer, DecoderModel, layer_index
from .layers.experts import expert_tensors


class Qwen3MoeSparseBlock(nn.Module):
    """`renormalize`: whether the picked experts' weights are renormalised (Qwen3-MoE: its
    config's norm_topk_prob; Qwen3.5's MoE always does)."""

    def __init__(self, config, quant_config: Optional[QuantizationConfig] = None, renormalize: Optional[bool] = None) -> None:
        super().__init__()
        if config.hidden_act != "silu":
            raise ValueError(f"Qwen3-MoE backport: unsupported activation {config.hidden_act!r}; only silu")
        # The router stays unquantized and whole on every rank, as in the engine's MoE models.
        self.gate = ReplicatedLinear(config.hidden_size, config.num_experts, bias=False, quant_config=None)
        self.experts = FusedMoE(
            num_experts=config.num_experts,
            top_k=config.num_experts_per_tok,
            hidden_size=config.hidden_size,
            intermediate_size=config.moe_intermediate_size,
            reduce_results=True,
            renormalize=bool(getattr(config, "norm_topk_prob", False)) if renormalize is None else renormalize,
            quant_config=quant_config,
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        hidden_states = hidden_states.view(-1, shape[-1])
        router_logits, _ = self.gate(hidden_states)
        return self.experts(hidden_states=hidden_states, router_logits=router_logits).view(shape)


def sparse(config, index: int) -> bool:
    """Whether layer `index` has the expert block (transformers' Qwen3MoeDecoderLayer)."""
    only_mlp = getattr(config, "mlp_only_layers", None) or ()
    step = getattr(config, "decoder_sparse_step", 1) or 1
    return index not in only_mlp and config.num_experts > 0 and (index + 1) % step == 0


class Qwen3MoeModel(DecoderModel):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        def layer(prefix: str) -> DecoderLayer:
            index = layer_index(prefix)
            mlp = Qwen3MoeSparseBlock(config, quant_config) if sparse(config, index) else None
            return DecoderLayer(config, cache_config, quant_config, mlp=mlp)

        super().__init__(config, cache_config, quant_config, layer_fn=layer)


class Qwen3MoeForCausalLM(DecoderForCausalLM):
    model_cls = Qwen3MoeModel

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        """The experts' tensors into the FusedMoE layers' stacked weights; the rest as the decoder's."""
        super().load_weights(expert_tensors(self, self.config.num_experts, weights))
