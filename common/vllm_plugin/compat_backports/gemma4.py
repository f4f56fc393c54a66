"""Gemma 4's text model (`Gemma4ForCausalLM`, `gemma4_text`) for the vLLM 0.5.5 generation.

Gemma 4 keeps Gemma 3's frame (embeddings scaled by sqrt(hidden_size) in the weights' dtype, a
norm before and after attention and MLP, a tanh-GELU gated MLP, per-head q/k norms, sliding and
full layers, tied embeddings, Gemma 2's final logit soft-cap where set) and changes what
layers/gemma4.py says (its RMSNorm x * w, value norms, per-layer inputs, layer scalars, the full
layers' proportional rope, the MoE block), shared with the V1 engine's backport (gemma4_v1.py).
What is this engine's own:
- attention is unscaled (scaling 1.0) and takes the KV cache and its metadata as arguments;
- full layers have their own head size and KV heads (heads.py: wider heads than the sliding
  layers', fewer KV heads with `attention_k_eq_v`): this engine's KV cache has one shape for
  every layer, so each layer is served zero-padded to the widest head and with each KV head
  repeated for its query group (R10 writes the widest head and the most KV heads into the config
  the engine reads); with `attention_k_eq_v` their values are their keys' projection (before the
  key norm);
- each windowed layer's window reaches the engine's Attention through its cache config
  (windows.py; R10 switches the engine-wide window off);
- the last `num_kv_shared_layers` layers project queries only and attend over the keys and
  values of the last earlier layer of their type (heads.kv_producers): here through that layer's
  KV cache, into which they write the very values it wrote; with `use_double_wide_mlp` their MLP
  is twice as wide.
Refused rather than served wrong (check_config): what layers/gemma4.py refuses, and a layer whose
head or KV heads the engine's cache shape cannot hold.
"""

from typing import List, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from vllm.attention import Attention, AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.sequence import IntermediateTensors

from .gemma3 import Gemma3ForCausalLM, Gemma3Model
from .layers.decoder import DecoderAttention, GatedMLP
from .layers import gemma4 as shared_gemma4
from .layers.gemma4 import Gemma4DecoderLayer, PerLayerInputs, Shared, make_rotary, value_norm
from .layers.heads import kv_producers, layer_heads
from .layers.text_of_vlm import ServedAsText
from .layers.windows import SLIDING, layer_cache_config


def engine_kv_heads(config) -> int:
    """The KV heads a rank's cache holds (as the engine's ModelConfig.get_num_kv_heads divides them)."""
    return max(1, config.num_key_value_heads // get_tensor_model_parallel_world_size())


class Gemma4Attention(DecoderAttention):
    def __init__(
        self,
        config,
        head_dim: int,
        kv_heads: int,
        kind: str,
        reuses: bool,
        cache_config: Optional[CacheConfig],
        quant_config: Optional[QuantizationConfig],
    ) -> None:
        rope = config.rope_parameters[kind]
        # The layer's rope parameters reach make_rotary as its `rope_scaling`.
        super().__init__(
            config,
            cache_config,
            quant_config,
            scaling=1.0,
            rope=(rope["rope_theta"], rope),
            head_dim=head_dim,
            num_kv_heads=kv_heads,
        )
        self.cache_head, self.eps = config.head_dim, config.rms_norm_eps
        engine_kv = engine_kv_heads(config)
        if engine_kv % self.num_kv_heads:
            raise ValueError(f"Gemma 4 backport: {self.num_kv_heads} KV heads a rank do not repeat to the engine's {engine_kv}")
        self.repeat = engine_kv // self.num_kv_heads
        # A layer that reuses another's keys and values, or whose values are its keys, loads no
        # projection for them (the checkpoint has none): those columns are computed and dropped.
        self.kind, self.reuses = kind, reuses
        self.k_is_v = bool(getattr(config, "attention_k_eq_v", False)) and kind != SLIDING

    def make_attn(self, config, scale: float, cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]) -> Attention:
        """The engine's one KV cache shape: its head_dim (the widest) and KV heads (the most)."""
        kv = engine_kv_heads(config)
        return Attention(self.num_heads, config.head_dim, scale, num_kv_heads=kv, cache_config=cache_config, quant_config=quant_config)

    def make_rotary(self, config, base: float, rope: dict) -> nn.Module:
        return make_rotary(config, rope, self.head_dim)

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        """Heads zero-padded to the engine's head size (a narrower layer's)."""
        if self.cache_head == self.head_dim:
            return x
        heads = x.view(x.shape[0], -1, self.head_dim)
        return F.pad(heads, (0, self.cache_head - self.head_dim)).view(x.shape[0], -1)

    def _cached(self, x: torch.Tensor) -> torch.Tensor:
        """Keys or values in the engine's cache shape: padded, each KV head repeated for its group."""
        x = self._pad(x)
        if self.repeat == 1:
            return x
        return x.view(x.shape[0], -1, self.cache_head).repeat_interleave(self.repeat, dim=1).view(x.shape[0], -1)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
        shared: Shared,
    ) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = self._per_head(self.q_norm, q)
        if self.reuses:
            # The engine's rotary op turns a key too: a zero one, dropped.
            q, _ = self.rotary_emb(positions, q, k.new_zeros(k.shape))
            k, v, kv_cache = shared[self.kind]
        else:
            v = k if self.k_is_v else v  # (the key's projection before its norm)
            k = self._per_head(self.k_norm, k)
            v = value_norm(v.reshape(-1, self.head_dim), self.eps).view(v.shape)
            q, k = self.rotary_emb(positions, q, k)
            k, v = self._cached(k), self._cached(v)
            shared[self.kind] = (k, v, kv_cache)  # the last one before the shared layers is theirs
        out = self.attn(self._pad(q), k, v, kv_cache, attn_metadata)
        if self.cache_head != self.head_dim:
            out = out.view(out.shape[0], -1, self.cache_head)[..., : self.head_dim].reshape(out.shape[0], -1)
        output, _ = self.o_proj(out)
        return output


def make_layer(
    config, index: int, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
) -> nn.Module:
    """Layer `index`: the shared Gemma 4 layer around this engine's attention and MLP."""
    head_dim, kv_heads = layer_heads(config)[index]
    reuses = kv_producers(config)[index] is not None
    cache = layer_cache_config(cache_config, window)
    attention = Gemma4Attention(config, head_dim, kv_heads, config.layer_types[index], reuses, cache, quant_config)
    wide = 2 if reuses and getattr(config, "use_double_wide_mlp", False) else 1
    mlp = GatedMLP(config.hidden_size, config.intermediate_size * wide, config.hidden_activation, quant_config)
    return Gemma4DecoderLayer(config, attention, mlp, quant_config)


class Gemma4Model(PerLayerInputs, Gemma3Model):
    norm_cls = RMSNorm

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, cache_config, quant_config)
        if get_pp_group().world_size > 1 and any(p is not None for p in kv_producers(config)):
            raise ValueError("Gemma 4 backport: layers sharing keys and values with pipeline parallelism are not supported")
        self.build_per_layer_inputs(config, quant_config, prefix="model")

    def make_layer(
        self, config, index: int, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        return make_layer(config, index, window, cache_config, quant_config)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: List[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate_tensors: Optional[IntermediateTensors] = None,
    ):
        # Every pipeline rank embeds the tokens: the per-layer inputs of its layers come from them.
        embeds = self.embed(input_ids)
        per_layer = self.per_layer_inputs(input_ids, embeds)
        hidden_states = embeds if get_pp_group().is_first_rank else intermediate_tensors["hidden_states"]
        shared: Shared = {}
        for i in range(self.start_layer, self.end_layer):
            layer_input = None if per_layer is None else per_layer[:, i]
            hidden_states = self.layers[i](positions, hidden_states, layer_input, kv_caches[i - self.start_layer], attn_metadata, shared)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states})
        return self.norm(hidden_states)


class Gemma4ForCausalLM(Gemma3ForCausalLM):
    model_cls = Gemma4Model

    @staticmethod
    def check_config(config) -> None:
        shared_gemma4.check_config(config)
        # The engine sizes every layer's KV cache by head_dim and num_key_value_heads (R10 writes
        # the widest head and the most KV heads there): a layer must fit, its KV heads repeating.
        for size, kv in layer_heads(config):
            if size > config.head_dim or config.num_key_value_heads % kv:
                raise ValueError(
                    f"Gemma 4 backport: a layer's {kv} KV heads of {size} do not fit the engine's cache shape "
                    f"({config.num_key_value_heads} KV heads of head_dim {config.head_dim})"
                )

    @staticmethod
    def target(name: str) -> Tuple[str, object]:
        stacked = shared_gemma4.target(name)
        return (stacked, None) if stacked is not None else Gemma3ForCausalLM.target(name)


class Gemma4ForConditionalGeneration(ServedAsText, Gemma4ForCausalLM):
    """Gemma 4's published checkpoints (text, vision and audio) served as text."""
