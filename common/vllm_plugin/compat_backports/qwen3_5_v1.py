"""Qwen3.5's text model (`Qwen3_5ForCausalLM`, and the published `Qwen3_5ForConditionalGeneration`
served as text) for the V1 engine's model API (vLLM 0.11: nv-a100, hygon-k100), on the engine's own
Qwen3-Next layers (vllm/model_executor/models/qwen3_next.py).

transformers 5 derives Qwen3.5 from Qwen3-Next (modular_qwen3_5.py: its Gated DeltaNet is
Qwen3-Next's with other input projections, its gated attention is Qwen3-Next's, its norms are
zero-centred), so the engine's Qwen3-Next layers compute it: their kernels on the card, their state
in the engine's mamba-style cache, their CUDA graphs. What differs is handled here, and only that:
- the Gated DeltaNet's input projections are stored apart (in_proj_qkv: q | k | v, each whole;
  in_proj_z; in_proj_b; in_proj_a) where Qwen3-Next stores in_proj_qkvz and in_proj_ba interleaved
  per key-head group. The engine's layer keeps its two matmuls, each a merged projection of the
  checkpoint's parts ([q, k, v, z] and [b, a]), every part cut per rank as the engine cuts a merged
  projection (a rank's share of the key heads and of the value heads they serve, as the
  convolution's channels, dt_bias and A_log are cut), and `fix_query_key_value_ordering` reads that
  layout;
- every layer has a dense SiLU MLP (Qwen3-Next's class requires experts); the MoE has routed
  experts and a gated shared expert in every layer (qwen3_5_moe_v1.py);
- the attention layers take no bias (Qwen3-Next's has none on its output projection): a config
  with `attention_bias` is refused, no published Qwen3.5 has one.
Its rope is the model's partial rotary (R12's config class states it as the engine reads it); the
published checkpoints' multimodal rope sections are the plain rope for text, where every position
id of a token is the same.

Where the engine API differs from vLLM 0.5.5's (qwen3_5.py, the BI-100's backport): attention and
the DeltaNet layers read their KV cache, their state slots and metadata from the engine's forward
context, and the engine keeps each sequence's convolution and recurrent state (HasInnerState,
IsHybrid and the state shapes below), where the 0.5.5 backport keeps a pool of its own fed by the
runner's request ids and starts --enforce-eager; the engine turns prefix caching off for a hybrid
by itself; the model is built from one `vllm_config` and compiled as Qwen3-Next is; the logits
processor takes no sampling metadata. Shared with the 0.5.5 backport (layers/): the config checks
and the multi-token-prediction head it skips (hybrid.py), the stacked checkpoint names
(stacking.py), a vision-language checkpoint's text (text_of_vlm.py).
"""

from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import torch
from torch import nn
from vllm.compilation.decorators import support_torch_compile
from vllm.config import VllmConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import GemmaRMSNorm
from vllm.model_executor.layers.linear import MergedColumnParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.mamba.mamba_utils import MambaStateDtypeCalculator, MambaStateShapeCalculator
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.interfaces import HasInnerState, IsHybrid
from vllm.model_executor.models.qwen2_moe import Qwen2MoeMLP
from vllm.model_executor.models.qwen3_next import Qwen3NextAttention, Qwen3NextGatedDeltaNet, Qwen3NextModel
from vllm.model_executor.models.utils import extract_layer_index, make_empty_intermediate_tensors_factory, make_layers, maybe_prefix

from .layers.hybrid import LINEAR, NO_PIPELINE, check_activation, layer_types, linear_heads, without_mtp
from .layers.stacking import STACKED, target
from .layers.text_of_vlm import ServedAsTextV1, tied_by_wrapper

# The DeltaNet's parts in the engine's two merged projections: (engine parameter, checkpoint name,
# shard); in_proj_qkv holds the first three shards at once (q | k | v), split before they load.
STACKED_V1 = STACKED + (
    ("in_proj_qkvz", "in_proj_qkv", (0, 1, 2)),
    ("in_proj_qkvz", "in_proj_z", 3),
    ("in_proj_ba", "in_proj_b", 0),
    ("in_proj_ba", "in_proj_a", 1),
)


class Qwen3_5GatedDeltaNet(Qwen3NextGatedDeltaNet):
    """The engine's Gated DeltaNet layer (its forward, kernels and state) over Qwen3.5's projections."""

    def __init__(self, config, model_config=None, cache_config=None, quant_config=None, speculative_config=None, prefix: str = "") -> None:
        linear_heads(config, get_tensor_model_parallel_world_size())  # whole heads per rank, refused otherwise
        super().__init__(config, model_config, cache_config, quant_config, speculative_config, prefix)
        # Replaces the group-interleaved projections the engine's layer builds for Qwen3-Next's checkpoints.
        parts = [self.key_dim, self.key_dim, self.value_dim, self.value_dim]
        self.in_proj_qkvz = MergedColumnParallelLinear(
            self.hidden_size, parts, bias=False, quant_config=quant_config, prefix=f"{prefix}.in_proj_qkvz"
        )
        self.in_proj_ba = MergedColumnParallelLinear(
            self.hidden_size, [self.num_v_heads] * 2, bias=False, quant_config=quant_config, prefix=f"{prefix}.in_proj_ba"
        )

    def fix_query_key_value_ordering(self, mixed_qkvz: torch.Tensor, mixed_ba: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """(query, key [tokens, key heads, dk], value, z [tokens, value heads, dv], b, a [tokens,
        value heads]) of this rank, from its parts of the merged projections."""
        keys, values = self.key_dim // self.tp_size, self.value_dim // self.tp_size
        query, key, value, z = mixed_qkvz.split([keys, keys, values, values], dim=-1)
        b, a = mixed_ba.chunk(2, dim=-1)
        tokens = len(mixed_qkvz)
        return (
            query.reshape(tokens, -1, self.head_k_dim),
            key.reshape(tokens, -1, self.head_k_dim),
            value.reshape(tokens, -1, self.head_v_dim),
            z.reshape(tokens, -1, self.head_v_dim),
            b.contiguous(),
            a.contiguous(),
        )


class Qwen3_5DecoderLayer(nn.Module):
    """A pre-norm layer as the engine's Qwen3-Next layer computes it: the token mixer (Gated
    DeltaNet or gated attention) writes into an output buffer, the residual add is fused into the
    next norm."""

    def __init__(self, vllm_config: VllmConfig, layer_type: str, mlp: nn.Module, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        own = dict(model_config=vllm_config.model_config, cache_config=vllm_config.cache_config, quant_config=vllm_config.quant_config)
        if layer_type == LINEAR:
            self.linear_attn = Qwen3_5GatedDeltaNet(
                config, speculative_config=vllm_config.speculative_config, prefix=f"{prefix}.linear_attn", **own
            )
        else:
            self.self_attn = Qwen3NextAttention(config, prefix=f"{prefix}.self_attn", **own)
        self.mlp = mlp
        self.input_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self, hidden_states: torch.Tensor, residual: Optional[torch.Tensor], positions: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual, hidden_states = hidden_states, self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        mixed = torch.empty_like(hidden_states)
        if hasattr(self, "linear_attn"):
            self.linear_attn(hidden_states=hidden_states, output=mixed)
        else:
            self.self_attn(hidden_states=hidden_states, output=mixed, positions=positions)
        hidden_states, residual = self.post_attention_layernorm(mixed, residual)
        return self.mlp(hidden_states), residual


@support_torch_compile
class Qwen3_5Model(nn.Module):
    """The embeddings, the layers (`mlp`: each layer's MLP, the MoE's experts), the final norm;
    run and compiled as the engine's Qwen3-Next model."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        types = layer_types(config)
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)

        def layer(prefix: str) -> nn.Module:
            return Qwen3_5DecoderLayer(vllm_config, types[extract_layer_index(prefix)], self.mlp(vllm_config, f"{prefix}.mlp"), prefix)

        self.start_layer, self.end_layer, self.layers = make_layers(config.num_hidden_layers, layer, prefix=f"{prefix}.layers")
        self.norm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.make_empty_intermediate_tensors = make_empty_intermediate_tensors_factory(["hidden_states", "residual"], config.hidden_size)

    def mlp(self, vllm_config: VllmConfig, prefix: str) -> nn.Module:
        config = vllm_config.model_config.hf_config
        return Qwen2MoeMLP(
            config.hidden_size, config.intermediate_size, config.hidden_act, quant_config=vllm_config.quant_config, prefix=prefix
        )

    # The engine's own: the embedding lookup, and the layer loop with its residual stream.
    get_input_embeddings = Qwen3NextModel.get_input_embeddings
    forward = Qwen3NextModel.forward


class Qwen3_5ForCausalLM(nn.Module, HasInnerState, IsHybrid):
    model_cls = Qwen3_5Model
    packed_modules_mapping = {
        "qkv_proj": ["q_proj", "k_proj", "v_proj"],
        "gate_up_proj": ["gate_proj", "up_proj"],
        "in_proj_qkvz": ["in_proj_qkv", "in_proj_z"],
        "in_proj_ba": ["in_proj_b", "in_proj_a"],
    }

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = vllm_config.model_config.hf_config
        if get_pp_group().world_size > 1:
            raise ValueError(NO_PIPELINE)
        check_activation(config)
        if getattr(config, "attention_bias", False):
            raise ValueError("Qwen3.5 backport: attention_bias true; the engine's gated attention (Qwen3-Next's) has no biases")
        self.config = config
        self.model = self.model_cls(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        if config.tie_word_embeddings:
            self.lm_head = self.model.embed_tokens  # the output matrix is the embeddings; a checkpoint's lm_head is not loaded
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, prefix=maybe_prefix(prefix, "lm_head"))
        self.logits_processor = LogitsProcessor(config.vocab_size)
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    def get_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings(input_ids)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        intermediate_tensors: Any = None,
        inputs_embeds: Optional[torch.Tensor] = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        return self.model(input_ids, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> Optional[torch.Tensor]:
        return self.logits_processor(self.lm_head, hidden_states)

    # The engine sizes each sequence's state from these (its mamba-style cache), from the text
    # config: the composite one of the served-as-text class too.
    @classmethod
    def get_mamba_state_dtype_from_config(cls, vllm_config: VllmConfig) -> Tuple[torch.dtype, torch.dtype]:
        return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
            vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
        )

    @classmethod
    def get_mamba_state_shape_from_config(cls, vllm_config: VllmConfig) -> Tuple[Tuple[int, ...], Tuple[int, ...]]:
        config = vllm_config.model_config.hf_text_config
        speculative = vllm_config.speculative_config
        return MambaStateShapeCalculator.gated_delta_net_state_shape(
            vllm_config.parallel_config.tensor_parallel_size,
            config.linear_num_key_heads,
            config.linear_num_value_heads,
            config.linear_key_head_dim,
            config.linear_value_head_dim,
            config.linear_conv_kernel_dim,
            speculative.num_speculative_tokens if speculative else 0,
        )

    def expert_weights(self, weights: Iterable[Tuple[str, torch.Tensor]], loaded: Set[str]) -> Iterable[Tuple[str, torch.Tensor]]:
        """The checkpoint's tensors for the dense loader (the MoE loads its experts first)."""
        return weights

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> Set[str]:
        params: Dict[str, nn.Parameter] = dict(self.named_parameters())
        loaded: Set[str] = set()
        for name, tensor in self.expert_weights(without_mtp(weights), loaded):
            if "rotary_emb.inv_freq" in name or (self.config.tie_word_embeddings and name.startswith("lm_head.")):
                continue
            name, shard = target(name, STACKED_V1)
            if name not in params:
                raise KeyError(f"Qwen3.5 backport: checkpoint tensor {name} has no parameter in the model")
            param = params[name]
            if shard is None:
                getattr(param, "weight_loader", default_weight_loader)(param, tensor)
            elif isinstance(shard, tuple):  # in_proj_qkv: q | k | v, each its own shard
                for part, piece in zip(shard, tensor.split(self._qkv_sizes(), dim=0), strict=True):
                    param.weight_loader(param, piece, part)
            else:
                param.weight_loader(param, tensor, shard)
            loaded.add(name)
        return loaded

    def _qkv_sizes(self) -> List[int]:
        """The whole q, k and v of a DeltaNet layer's in_proj_qkv."""
        config = self.config
        keys = config.linear_num_key_heads * config.linear_key_head_dim
        return [keys, keys, config.linear_num_value_heads * config.linear_value_head_dim]


class Qwen3_5ForConditionalGeneration(ServedAsTextV1, Qwen3_5ForCausalLM):
    """Qwen3.5's published checkpoints served as text (the vision tower `model.visual` skipped)."""

    def text_config(self, config: Any) -> Any:
        config.text_config.tie_word_embeddings = tied_by_wrapper(config, unstated=False)
        return config.text_config
