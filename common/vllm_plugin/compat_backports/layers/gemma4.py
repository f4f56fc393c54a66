"""What Gemma 4's backports share on every engine generation (gemma4.py for vLLM 0.5.5,
gemma4_v1.py for the V1 engine's 0.11): the parts built from layers that take the same arguments
on both (torch, the engine's RMSNorm, ReplicatedLinear, VocabParallelEmbedding, RotaryEmbedding
and get_rope), and the refusals of what no backport serves. What the two engine APIs do
differently (the attention and its KV cache, how the model is built and called) is in the
family modules.

Per transformers 5's modeling_gemma4.py / configuration_gemma4.py:
- the decoder layer is Gemma 3's four norms (four_norms.py) with Gemma 4's RMSNorm (x * w); after
  the MLP, with per-layer inputs (`hidden_size_per_layer_input`), a normed projection of
  gelu(gate(h)) times the layer's slice of them is added, and the layer's output is multiplied by
  its own `layer_scalar` (a checkpoint tensor);
- the per-layer inputs: a second embedding table, packed for all layers and scaled by sqrt(its
  width), averaged (x 2^-1/2) with a normed projection of the scaled embeddings (PerLayerInputs);
- values get an RMSNorm per head without a weight (value_norm), in float32 as transformers does;
- the full layers' "proportional" rope rotates the first partial_rotary_factor of each half of
  the head at frequencies over the whole head size and leaves the rest unrotated, which get_rope
  has no kind for (ProportionalRotaryEmbedding, on the engine's rotary kernels);
- with `enable_moe_block` (26B-A4B) each layer adds routed experts beside its dense MLP: a router
  over the residual stream (an RMSNorm without weight, times its `scale` and hidden_size^-1/2, a
  softmax in float32, the top `top_k_experts` renormalised, each times its expert's
  `per_expert_scale`), tanh-GELU-gated experts of `moe_intermediate_size` over their own norm of
  the stream, and the two branches each normed before their sum is. The engines' FusedMoE is
  SiLU-gated only (0.11's "gelu" is the exact GELU): the experts run on gated_experts.py.
"""

from typing import Dict, Optional, Tuple

import torch
from torch import nn
from torch.nn import functional as F
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import ReplicatedLinear
from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding, get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

from .four_norms import FourNormLayer
from .gated_experts import GatedExperts
from .heads import kv_producers
from .windows import layer_windows

ROPE_KINDS = ("default", "proportional")
# The per-layer inputs' gate activation and the experts' (transformers' name): the MLP's own.
GATE_ACTIVATIONS = {"gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh")}
# The MoE block's sizes (transformers' names), each a positive integer.
MOE_SIZES = ("num_experts", "top_k_experts", "moe_intermediate_size")
# Layer type -> what the latest layer of that type computed for the layers that share it (their
# keys and values, and how each generation reaches that layer's KV cache).
Shared = Dict[str, Tuple[torch.Tensor, ...]]


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


def make_rotary(config, rope: dict, head_dim: int) -> nn.Module:
    """The rotary embedding of a layer whose rope parameters are `rope` (config.rope_parameters
    is keyed by layer type)."""
    if rope.get("rope_type", "default") == "default":
        return get_rope(head_dim, rotary_dim=head_dim, max_position=config.max_position_embeddings, base=rope["rope_theta"])
    fraction, factor = rope.get("partial_rotary_factor", 1.0), rope.get("factor", 1.0)
    return ProportionalRotaryEmbedding(head_dim, config.max_position_embeddings, rope["rope_theta"], fraction, factor)


def value_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm without a weight over the last dimension, in float32 as transformers computes it."""
    y = x.float()
    return (y * torch.pow(y.pow(2).mean(-1, keepdim=True) + eps, -0.5)).to(x.dtype)


def per_head(fn, x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """`fn` over each head's head_dim values, shape kept. The engine's norm kernels read their input
    as contiguous rows: one head a rank is a strided slice of the fused projection, copied here."""
    return fn(x.contiguous().view(-1, head_dim)).view(x.shape)


class Gemma4Router(nn.Module):
    """Each token's experts and their weights, as transformers' Gemma4TextRouter picks them."""

    def __init__(self, config, prefix: str = "") -> None:
        super().__init__()
        # Unquantized and whole on every rank, as the engines' MoE models keep their gates.
        self.proj = ReplicatedLinear(config.hidden_size, config.num_experts, bias=False, quant_config=None, prefix=f"{prefix}.proj")
        self.scale = nn.Parameter(torch.ones(config.hidden_size), requires_grad=False)
        self.per_expert_scale = nn.Parameter(torch.ones(config.num_experts), requires_grad=False)
        self.top_k, self.eps, self.root = config.top_k_experts, config.rms_norm_eps, config.hidden_size**-0.5

    def forward(self, hidden_states: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits, _ = self.proj(value_norm(hidden_states, self.eps) * self.scale * self.root)
        weights, experts = torch.topk(F.softmax(logits, dim=-1, dtype=torch.float32), self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[experts], experts


class Gemma4DecoderLayer(FourNormLayer):
    """One Gemma 4 layer around the attention and MLP of the engine generation (see the module's doc)."""

    def __init__(self, config, self_attn: nn.Module, mlp: nn.Module, quant_config=None, prefix: str = "") -> None:
        super().__init__(config.hidden_size, config.rms_norm_eps, RMSNorm, self_attn, mlp)
        norm = lambda: RMSNorm(config.hidden_size, eps=config.rms_norm_eps)  # noqa: E731
        width = config.hidden_size_per_layer_input
        if width:
            self.per_layer_input_gate = ReplicatedLinear(
                config.hidden_size, width, bias=False, quant_config=quant_config, prefix=f"{prefix}.per_layer_input_gate"
            )
            self.per_layer_projection = ReplicatedLinear(
                width, config.hidden_size, bias=False, quant_config=quant_config, prefix=f"{prefix}.per_layer_projection"
            )
            self.post_per_layer_input_norm = norm()
            self.gate_act = GATE_ACTIVATIONS[config.hidden_activation]
        self.moe = bool(getattr(config, "enable_moe_block", False))
        if self.moe:
            self.router = Gemma4Router(config, prefix=f"{prefix}.router")
            self.experts = GatedExperts(
                config.num_experts, config.hidden_size, config.moe_intermediate_size, GATE_ACTIVATIONS[config.hidden_activation]
            )
            self.pre_feedforward_layernorm_2 = norm()
            self.post_feedforward_layernorm_1, self.post_feedforward_layernorm_2 = norm(), norm()
        self.layer_scalar = nn.Parameter(torch.ones(1), requires_grad=False)

    def forward(  # type: ignore[override]
        self, positions: torch.Tensor, hidden_states: torch.Tensor, per_layer_input: Optional[torch.Tensor], *attention_args
    ) -> torch.Tensor:
        hidden_states = super().forward(positions, hidden_states, *attention_args)
        if per_layer_input is not None:
            gate, _ = self.per_layer_input_gate(hidden_states)
            branch, _ = self.per_layer_projection(self.gate_act(gate) * per_layer_input)
            hidden_states = hidden_states + self.post_per_layer_input_norm(branch)
        return hidden_states * self.layer_scalar

    def feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        mlp = super().feed_forward(hidden_states)
        if not self.moe:
            return mlp
        # The router and the experts read the stream before the MLP, not the MLP's input norm.
        weights, experts = self.router(hidden_states)
        routed = self.experts(self.pre_feedforward_layernorm_2(hidden_states), weights, experts)
        return self.post_feedforward_layernorm_1(mlp) + self.post_feedforward_layernorm_2(routed)


class PerLayerInputs:
    """The model's per-layer inputs (a mixin of the generations' Gemma4Model: its tensors are
    checkpoint names of the model itself)."""

    def build_per_layer_inputs(self, config, quant_config=None, prefix: str = "") -> None:
        width = config.hidden_size_per_layer_input
        if not width:
            return
        packed = config.num_hidden_layers * width
        self.embed_tokens_per_layer = VocabParallelEmbedding(
            config.vocab_size_per_layer_input, packed, quant_config=quant_config, prefix=f"{prefix}.embed_tokens_per_layer"
        )
        self.per_layer_model_projection = ReplicatedLinear(
            config.hidden_size, packed, bias=False, quant_config=quant_config, prefix=f"{prefix}.per_layer_model_projection"
        )
        self.per_layer_projection_norm = RMSNorm(width, eps=config.rms_norm_eps)
        self.register_buffer("per_layer_normalizer", torch.tensor(width**0.5), persistent=False)  # type: ignore[attr-defined]

    def per_layer_inputs(self, input_ids: torch.Tensor, embeds: torch.Tensor) -> Optional[torch.Tensor]:
        """[tokens, layers, width]: the token's own per-layer embedding and the projection of its
        scaled embedding, each as transformers scales them, averaged; None without them."""
        config = self.config  # type: ignore[attr-defined]
        layers, width = config.num_hidden_layers, config.hidden_size_per_layer_input
        if not width:
            return None
        own = self.embed_tokens_per_layer(input_ids)
        own = (own * self.per_layer_normalizer.to(own.dtype)).view(-1, layers, width)
        projected, _ = self.per_layer_model_projection(embeds)
        projected = self.per_layer_projection_norm((projected * config.hidden_size**-0.5).reshape(-1, width))
        return (projected.view(-1, layers, width) + own) * 2.0**-0.5


def check_config(config) -> None:
    """Refuse what no Gemma 4 backport serves (each generation's class adds its own limits)."""
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
    for kind in set(config.layer_types):
        rope = config.rope_parameters.get(kind) or {}
        if rope.get("rope_type", "default") not in ROPE_KINDS or "rope_theta" not in rope:
            raise ValueError(f"Gemma 4 backport: {kind} layers' rope {rope} is not supported on this engine")
    if config.hidden_size_per_layer_input and config.hidden_activation not in GATE_ACTIVATIONS:
        raise ValueError(f"Gemma 4 backport: per-layer inputs with activation {config.hidden_activation!r}")


def target(name: str) -> Optional[str]:
    """The checkpoint tensors both generations load as they are named (shard None): the experts,
    stored stacked already (and "up_proj" is inside "gate_up_proj"); None for any other."""
    return name if ".experts." in name else None
