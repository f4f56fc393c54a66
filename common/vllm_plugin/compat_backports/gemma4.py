"""Gemma 4's text model (`Gemma4ForCausalLM`, `gemma4_text`) for the vLLM 0.5.5 generation.

Gemma 4 keeps Gemma 3's frame (embeddings scaled by sqrt(hidden_size) in the weights' dtype, a
norm before and after attention and MLP, a tanh-GELU gated MLP, per-head q/k norms, sliding and
full layers, tied embeddings, Gemma 2's final logit soft-cap where set) and changes, per
transformers 5's modeling_gemma4.py / configuration_gemma4.py:
- its RMSNorm multiplies by the weight itself (Gemma 3's by 1 + weight): the engine's RMSNorm;
- values get an RMSNorm per head without a weight, and attention is unscaled (scaling 1.0);
- full layers have their own head size and KV heads (heads.py: wider heads than the sliding
  layers', fewer KV heads with `attention_k_eq_v`; served zero-padded to the widest head and
  with each KV head repeated for its query group, the engine's one KV cache shape), with
  `attention_k_eq_v` their values are their keys' projection (before the key norm), and their own rope
  (`rope_parameters` keyed by layer type): "proportional" rotates the first
  partial_rotary_factor of each half of the head at frequencies over the whole head size and
  leaves the rest unrotated, which get_rope has no kind for (ProportionalRotaryEmbedding);
- per-layer inputs (`hidden_size_per_layer_input`): a second embedding table, packed for all
  layers and scaled by sqrt(its width), averaged (x 2^-1/2) with a normed projection of the
  scaled embeddings; each layer, after its MLP, adds a normed projection of gelu(gate(h)) times
  its slice;
- each layer's output is multiplied by its own `layer_scalar` (a checkpoint tensor);
- the last `num_kv_shared_layers` layers project queries only and attend over the keys and
  values of the last earlier layer of their type (heads.kv_producers): here through that layer's
  KV cache, into which they write the very values it wrote; with `use_double_wide_mlp` their MLP
  is twice as wide;
- with `enable_moe_block` (26B-A4B) each layer adds routed experts beside its dense MLP: a router
  over the residual stream (an RMSNorm without weight, times its `scale` and hidden_size^-1/2, a
  softmax in float32, the top `top_k_experts` renormalised, each times its expert's
  `per_expert_scale`), tanh-GELU-gated experts of `moe_intermediate_size` over their own norm of
  the stream, and the two branches each normed before their sum is. The engine's FusedMoE is
  SiLU-gated only: the experts run on gated_experts.py's grouped path.
Refused rather than served wrong (check_config): bidirectional attention over all tokens, rope
kinds other than default and proportional, a layer whose head or KV heads the engine's cache shape
cannot hold, an MoE block without its sizes.
"""

from typing import Dict, List, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from vllm.attention import Attention, AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.sequence import IntermediateTensors

from .layers.gated_experts import GatedExperts
from .gemma3 import Gemma3ForCausalLM, Gemma3Model
from .layers.text_of_vlm import ServedAsText
from .layers.heads import kv_producers, layer_heads
from .layers.decoder import DecoderAttention, GatedMLP
from .layers.windows import SLIDING, layer_cache_config, layer_windows

ROPE_KINDS = ("default", "proportional")
# The per-layer inputs' gate activation (transformers' name): the MLP's own.
GATE_ACTIVATIONS = {"gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}
# The MoE block's sizes (transformers' names), each a positive integer.
MOE_SIZES = ("num_experts", "top_k_experts", "moe_intermediate_size")
# Layer type -> the keys and values (padded) its latest layer computed and that layer's KV cache.
Shared = Dict[str, Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


class ProportionalRotaryEmbedding(RotaryEmbedding):
    """Gemma 4's "proportional" rope over the whole head (neox pairs i, i + head/2): the first
    `fraction` of each half rotates at 1 / base^(2j / head_size), the rest has frequency 0 (cos
    1, sin 0: unrotated); frequencies are divided by `factor`. The engine's rotary kernels apply it."""

    def __init__(self, head_size: int, max_position: int, base: float, fraction: float, factor: float) -> None:
        self.fraction, self.factor = fraction, factor  # read by _compute_inv_freq inside __init__
        super().__init__(head_size, head_size, max_position, base, True, torch.get_default_dtype())

    def _compute_inv_freq(self, base: float) -> torch.Tensor:
        angles = int(self.fraction * self.head_size // 2)
        rotated = 1.0 / (base ** (torch.arange(0, 2 * angles, 2, dtype=torch.float) / self.head_size))
        return torch.cat((rotated, torch.zeros(self.head_size // 2 - angles))) / self.factor


def engine_kv_heads(config) -> int:
    """The KV heads a rank's cache holds (as the engine's ModelConfig.get_num_kv_heads divides them)."""
    return max(1, config.num_key_value_heads // get_tensor_model_parallel_world_size())


def value_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a weight, in float32 as transformers computes it."""
    y = x.float()
    return (y * torch.pow(y.pow(2).mean(-1, keepdim=True) + eps, -0.5)).to(x.dtype)


class Gemma4Router(nn.Module):
    """Each token's experts and their weights, as transformers' Gemma4TextRouter picks them."""

    def __init__(self, config) -> None:
        super().__init__()
        # Unquantized and whole on every rank, as the engine's MoE models keep their gates.
        self.proj = ReplicatedLinear(config.hidden_size, config.num_experts, bias=False, quant_config=None)
        self.scale = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        self.per_expert_scale = nn.Parameter(torch.ones(config.num_experts), requires_grad=False)
        self.top_k, self.eps, self.root = config.top_k_experts, config.rms_norm_eps, config.hidden_size**-0.5

    def forward(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.proj(value_norm(hidden_states, self.eps) * self.scale * self.root)
        weights, experts = torch.topk(F.softmax(logits, dim=-1, dtype=torch.float32), self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[experts], experts


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
        if rope.get("rope_type", "default") == "default":
            return super().make_rotary(config, base, None)
        fraction, factor = rope.get("partial_rotary_factor", 1.0), rope.get("factor", 1.0)
        return ProportionalRotaryEmbedding(self.head_dim, config.max_position_embeddings, base, fraction, factor)

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


class Gemma4DecoderLayer(nn.Module):
    def __init__(
        self,
        config,
        index: int,
        window: Optional[int],
        cache_config: Optional[CacheConfig],
        quant_config: Optional[QuantizationConfig],
    ) -> None:
        super().__init__()
        head_dim, kv_heads = layer_heads(config)[index]
        reuses = kv_producers(config)[index] is not None
        kind = config.layer_types[index]
        cache = layer_cache_config(cache_config, window)
        self.self_attn = Gemma4Attention(config, head_dim, kv_heads, kind, reuses, cache, quant_config)
        wide = 2 if reuses and getattr(config, "use_double_wide_mlp", False) else 1
        self.mlp = GatedMLP(config.hidden_size, config.intermediate_size * wide, config.hidden_activation, quant_config)
        norm = lambda: RMSNorm(config.hidden_size, eps=config.rms_norm_eps)  # noqa: E731
        self.input_layernorm, self.post_attention_layernorm = norm(), norm()
        self.pre_feedforward_layernorm, self.post_feedforward_layernorm = norm(), norm()
        width = config.hidden_size_per_layer_input
        if width:
            self.per_layer_input_gate = ReplicatedLinear(config.hidden_size, width, bias=False, quant_config=quant_config)
            self.per_layer_projection = ReplicatedLinear(width, config.hidden_size, bias=False, quant_config=quant_config)
            self.post_per_layer_input_norm = norm()
            self.gate_act = GATE_ACTIVATIONS[config.hidden_activation]
        self.moe = bool(getattr(config, "enable_moe_block", False))
        if self.moe:
            self.router = Gemma4Router(config)
            self.experts = GatedExperts(
                config.num_experts, config.hidden_size, config.moe_intermediate_size, GATE_ACTIVATIONS[config.hidden_activation]
            )
            self.pre_feedforward_layernorm_2 = norm()
            self.post_feedforward_layernorm_1, self.post_feedforward_layernorm_2 = norm(), norm()
        self.layer_scalar = nn.Parameter(torch.ones(1), requires_grad=False)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: AttentionMetadata,
        per_layer_input: Optional[torch.Tensor],
        shared: Shared,
    ) -> torch.Tensor:
        # The whole residual stream, added in transformers' order (the engine's fused residual
        # has no place for the per-layer input branch and the scalar that follow the MLP).
        attn = self.self_attn(positions, self.input_layernorm(hidden_states), kv_cache, attn_metadata, shared)
        hidden_states = hidden_states + self.post_attention_layernorm(attn)
        mlp = self.mlp(self.pre_feedforward_layernorm(hidden_states))
        if self.moe:
            # The router and the experts read the stream before the MLP, not the MLP's input norm.
            weights, experts = self.router(hidden_states)
            routed = self.experts(self.pre_feedforward_layernorm_2(hidden_states), weights, experts)
            mlp = self.post_feedforward_layernorm_1(mlp) + self.post_feedforward_layernorm_2(routed)
        hidden_states = hidden_states + self.post_feedforward_layernorm(mlp)
        if per_layer_input is not None:
            gate, _ = self.per_layer_input_gate(hidden_states)
            branch, _ = self.per_layer_projection(self.gate_act(gate) * per_layer_input)
            hidden_states = hidden_states + self.post_per_layer_input_norm(branch)
        return hidden_states * self.layer_scalar


class Gemma4Model(Gemma3Model):
    norm_cls = RMSNorm

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, cache_config, quant_config)
        if get_pp_group().world_size > 1 and any(p is not None for p in kv_producers(config)):
            raise ValueError("Gemma 4 backport: layers sharing keys and values with pipeline parallelism are not supported")
        width = config.hidden_size_per_layer_input
        if width:
            packed = config.num_hidden_layers * width
            self.embed_tokens_per_layer = VocabParallelEmbedding(config.vocab_size_per_layer_input, packed, quant_config=quant_config)
            self.per_layer_model_projection = ReplicatedLinear(config.hidden_size, packed, bias=False, quant_config=quant_config)
            self.per_layer_projection_norm = RMSNorm(width, eps=config.rms_norm_eps)
            self.register_buffer("per_layer_normalizer", torch.tensor(width**0.5), persistent=False)

    def make_layer(
        self, config, index: int, window: Optional[int], cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]
    ) -> nn.Module:
        return Gemma4DecoderLayer(config, index, window, cache_config, quant_config)

    def per_layer_inputs(self, input_ids: torch.Tensor, embeds: torch.Tensor) -> torch.Tensor:
        """[tokens, layers, width]: the token's own per-layer embedding and the projection of its
        scaled embedding, each as transformers scales them, averaged."""
        layers, width = self.config.num_hidden_layers, self.config.hidden_size_per_layer_input
        own = self.embed_tokens_per_layer(input_ids)
        own = (own * self.per_layer_normalizer.to(own.dtype)).view(-1, layers, width)
        projected, _ = self.per_layer_model_projection(embeds)
        projected = self.per_layer_projection_norm((projected * self.config.hidden_size**-0.5).reshape(-1, width))
        return (projected.view(-1, layers, width) + own) * 2.0**-0.5

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
        per_layer = self.per_layer_inputs(input_ids, embeds) if self.config.hidden_size_per_layer_input else None
        hidden_states = embeds if get_pp_group().is_first_rank else intermediate_tensors["hidden_states"]
        shared: Shared = {}
        for i in range(self.start_layer, self.end_layer):
            layer_input = None if per_layer is None else per_layer[:, i]
            hidden_states = self.layers[i](positions, hidden_states, kv_caches[i - self.start_layer], attn_metadata, layer_input, shared)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states})
        return self.norm(hidden_states)


class Gemma4ForCausalLM(Gemma3ForCausalLM):
    model_cls = Gemma4Model

    @staticmethod
    def check_config(config) -> None:
        layer_windows(config)  # refuses layer types and windows it cannot serve
        if getattr(config, "use_bidirectional_attention", None) == "all":
            # ("vision" makes only image tokens bidirectional: a text model has none.)
            raise ValueError("Gemma 4 backport: bidirectional attention over all tokens is not supported on this engine (not a causal LM)")
        kv_producers(config)  # refuses shared layers without a layer to read from
        if getattr(config, "enable_moe_block", False):
            sizes = {name: getattr(config, name, None) for name in MOE_SIZES}
            if not all(isinstance(v, int) and v > 0 for v in sizes.values()) or sizes["top_k_experts"] > sizes["num_experts"]:
                raise ValueError(f"Gemma 4 backport: an MoE block needs positive sizes, top-k at most the experts: {sizes}")
            if config.hidden_activation not in GATE_ACTIVATIONS:
                raise ValueError(f"Gemma 4 backport: experts with activation {config.hidden_activation!r}")
        # The engine sizes every layer's KV cache by head_dim and num_key_value_heads (R10 writes
        # the widest head and the most KV heads there): a layer must fit, its KV heads repeating.
        for size, kv in layer_heads(config):
            if size > config.head_dim or config.num_key_value_heads % kv:
                raise ValueError(
                    f"Gemma 4 backport: a layer's {kv} KV heads of {size} do not fit the engine's cache shape "
                    f"({config.num_key_value_heads} KV heads of head_dim {config.head_dim})"
                )
        for kind in set(config.layer_types):
            rope = config.rope_parameters.get(kind) or {}
            if rope.get("rope_type", "default") not in ROPE_KINDS or "rope_theta" not in rope:
                raise ValueError(f"Gemma 4 backport: {kind} layers' rope {rope} is not supported on this engine")
        if config.hidden_size_per_layer_input and config.hidden_activation not in GATE_ACTIVATIONS:
            raise ValueError(f"Gemma 4 backport: per-layer inputs with activation {config.hidden_activation!r}")

    @staticmethod
    def target(name: str) -> Tuple[str, object]:
        # The experts are stored stacked already (and "up_proj" is inside "gate_up_proj").
        return (name, None) if ".experts." in name else Gemma3ForCausalLM.target(name)

    def make_empty_intermediate_tensors(self, batch_size: int, dtype: torch.dtype, device: torch.device) -> IntermediateTensors:
        # The layers pass the whole residual stream: no separate residual.
        return IntermediateTensors({"hidden_states": torch.zeros((batch_size, self.config.hidden_size), dtype=dtype, device=device)})


class Gemma4ForConditionalGeneration(ServedAsText, Gemma4ForCausalLM):
    """Gemma 4's published checkpoints (text, vision and audio) served as text."""
