"""OLMo 2 (`Olmo2ForCausalLM`) for the vLLM 0.5.5 generation, on the shared decoder (layers/decoder.py).

transformers' modeling_olmo2.py differs from the Llama layout in two places: the query and key
projections each go through one RMSNorm over their whole width (all heads at once, not per
head) before the rotary embedding; and the norms sit after the blocks, not before them:
`h = x + post_attention_layernorm(attn(x))`, `out = h + post_feedforward_layernorm(mlp(h))`.
Under tensor parallelism each rank holds some heads: the whole-width norm's mean of squares is
each rank's sum over its slice, summed over the ranks (one all-reduce of a number per token, the
collective every sharded layer uses; an all-gather of the whole width would move every head to
every rank, and the engine's all-gather into one tensor is NCCL's layout, which gloo refuses), and
each rank scales its slice by its slice of the weight.
"""

from typing import Optional, Tuple

import torch
from vllm.attention import AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size, tensor_model_parallel_all_reduce
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer, DecoderModel


class Olmo2Attention(DecoderAttention):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, cache_config, quant_config, qk_norm=False)
        self.tp_size, self.tp_rank = get_tensor_model_parallel_world_size(), get_tensor_model_parallel_rank()
        if self.tp_size > 1 and self.total_num_kv_heads % self.tp_size:
            raise ValueError(
                f"OLMo 2 backport: {self.total_num_kv_heads} KV heads are replicated over {self.tp_size} ranks; the k norm needs them split"
            )
        self.q_norm = RMSNorm(self.total_num_heads * self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = RMSNorm(self.total_num_kv_heads * self.head_dim, eps=config.rms_norm_eps)

    def _whole(self, norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
        # q and k are column slices of the fused qkv output; the engine's norm kernel reads rows
        # as contiguous memory.
        x = x.contiguous()
        if self.tp_size == 1:
            return norm(x)
        # As the engine's RMSNorm computes it (float32, then the weight in the model's dtype),
        # over the whole width.
        width = x.shape[-1]
        squares = tensor_model_parallel_all_reduce(x.float().pow(2).sum(dim=-1, keepdim=True))
        normed = x.float() * torch.rsqrt(squares / (width * self.tp_size) + norm.variance_epsilon)
        return normed.to(x.dtype) * norm.weight[self.tp_rank * width : (self.tp_rank + 1) * width]

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, kv_cache: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, self._whole(self.q_norm, q), self._whole(self.k_norm, k))
        output, _ = self.o_proj(self.attn(q, k, v, kv_cache, attn_metadata))
        return output


class Olmo2DecoderLayer(DecoderLayer):
    """OLMo 2's post-norm layer; EXAONE 4 passes its own `attention`."""

    def __init__(
        self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None, attention=None
    ) -> None:
        attention = attention if attention is not None else Olmo2Attention(config, cache_config, quant_config)
        super().__init__(config, cache_config, quant_config, attention=attention)
        del self.input_layernorm  # OLMo 2 normalizes the blocks' outputs only
        self.post_feedforward_layernorm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
        residual: Optional[torch.Tensor],
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        # The model hands over (last block's normalized output, the stream before it), as the
        # engine's fused-residual convention does; the final norm adds them the same way.
        x = hidden_states if residual is None else hidden_states + residual
        h = x + self.post_attention_layernorm(self.self_attn(positions, x, kv_cache, attn_metadata))
        return self.post_feedforward_layernorm(self.mlp(h)), h


class Olmo2Model(DecoderModel):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, cache_config, quant_config, layer_fn=lambda prefix: Olmo2DecoderLayer(config, cache_config, quant_config))


class Olmo2ForCausalLM(DecoderForCausalLM):
    model_cls = Olmo2Model
