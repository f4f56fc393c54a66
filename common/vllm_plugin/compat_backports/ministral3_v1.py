"""Ministral 3 (`Ministral3ForCausalLM`, Devstral Small 2's text model) for the V1 engine's model
API (vLLM 0.11: nv-a100, hygon-k100), on the engine's own Llama classes (models/llama.py, which
serve its Mistral).

transformers 5's modeling_ministral3.py is the Mistral layout with two differences (yarn.py,
shared with vLLM 0.5.5's backport, ministral3.py): its YaRN scales cos and sin by
mscale/mscale_all_dim's ratio, which the engine's yarn rotary (the same as 0.5.5's) is handed as
`attn_factor`, through the rope scaling of the config each decoder layer is built with; and each
query is scaled by its position after the rotary embedding, which the layer's rotary does here
(QueryScaledRotary: the engine's rotary, then the scale). Where the engine API differs from
0.5.5's: the engine's LlamaForCausalLM takes the decoder layer class (`layer_type`) and its
LlamaDecoderLayer the config it is built with, so nothing else of Llama is restated; a window on
every layer the engine takes itself (its model-wide window reaches every Attention), which 0.5.5
serves wrong and its backport refuses.

This engine has its own `Mistral3ForConditionalGeneration`, which builds its language model from
the text config's architecture.
"""

import copy
from typing import Optional, Tuple

import torch
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.models.llama import LlamaDecoderLayer, LlamaForCausalLM

from .layers.yarn import engine_rope_scaling, query_scale, rope_parameters, scaled_queries


class QueryScaledRotary(nn.Module):
    """The engine's rotary embedding, then Ministral 3's query scale by position (yarn.py)."""

    def __init__(self, rotary: nn.Module, beta: float, original: int) -> None:
        super().__init__()
        self.rotary, self.beta, self.original = rotary, beta, original

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: Optional[torch.Tensor]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        q, k = self.rotary(positions, q, k)
        return scaled_queries(positions, q, self.beta, self.original), k


class Ministral3DecoderLayer(LlamaDecoderLayer):
    def __init__(self, vllm_config: VllmConfig, prefix: str = "", config=None) -> None:
        config = config or vllm_config.model_config.hf_config
        params = rope_parameters(config)
        # The engine's layer reads `rope_scaling` into get_rope: transformers 5's YaRN restated.
        restated = copy.copy(config)
        restated.rope_scaling = engine_rope_scaling(params, config.max_position_embeddings)
        super().__init__(vllm_config, prefix, restated)
        scale = query_scale(params, config.max_position_embeddings)
        if scale is not None:
            self.self_attn.rotary_emb = QueryScaledRotary(self.self_attn.rotary_emb, *scale)


class Ministral3ForCausalLM(LlamaForCausalLM):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__(vllm_config=vllm_config, prefix=prefix, layer_type=Ministral3DecoderLayer)
