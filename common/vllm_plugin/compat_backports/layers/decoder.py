"""A decoder for the vLLM 0.5.5 generation built from that engine's own layers: the base the
backported families subclass (Qwen3 and Qwen3-MoE, Qwen3.5 and its MoE, Granite, OLMo 2,
EXAONE 4, Gemma 2, 3 and 4, Ministral 3).

The Llama layout as the engine's qwen2.py writes it (the same layers, the decoder-layer calling
convention its other models use, a fused residual in RMSNorm), so the vendor fork's kernels serve
it as they serve Qwen2. Its defaults are Qwen3's (transformers' modeling_qwen3.py: each head's
query and key through their own RMSNorm before the rotary embedding, an explicit `head_dim`,
`attention_bias` on every attention projection); a family changes what is its own through the
hooks each class offers (DecoderAttention's options and methods; DecoderLayer.branch_out;
DecoderModel's `layer_fn` and `embed`; DecoderForCausalLM's `model_cls`, `check_config`,
`make_logits_processor`, `logits_scale`, `target`). Weight names are the checkpoint's;
load_weights stacks q/k/v and gate/up as the engine's own models do (loading.py, shared with the
V1 engine's backports). Imported only inside the
engine, by the family modules the compat plugin loads.
"""

from typing import Any, Iterable, List, Optional, Tuple

import torch
from torch import nn
from vllm.attention import Attention, AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.sampler import Sampler
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.models.utils import make_layers
from vllm.model_executor.sampling_metadata import SamplingMetadata
from vllm.sequence import IntermediateTensors, SamplerOutput

from .loading import load_checkpoint, stacked_target

# A gated MLP's activation (transformers' name) -> the engine's fused act(gate) * up.
ACTIVATIONS = {
    "silu": SiluAndMul,
    "gelu_pytorch_tanh": lambda: GeluAndMul(approximate="tanh"),  # Gemma
}


class GatedMLP(nn.Module):
    """down(act(gate(x)) * up(x)): the engine's fused gate and up projection, then its down."""

    def __init__(
        self,
        hidden_size: int,
        intermediate_size: int,
        hidden_act: str,
        quant_config: Optional[QuantizationConfig] = None,
        bias: bool = False,
    ) -> None:
        super().__init__()
        if hidden_act not in ACTIVATIONS:
            raise ValueError(f"backport: unsupported activation {hidden_act!r}; only {', '.join(ACTIVATIONS)}")
        self.gate_up_proj = MergedColumnParallelLinear(hidden_size, [intermediate_size] * 2, bias=bias, quant_config=quant_config)
        self.down_proj = RowParallelLinear(intermediate_size, hidden_size, bias=bias, quant_config=quant_config)
        self.act_fn = ACTIVATIONS[hidden_act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up, _ = self.gate_up_proj(x)
        x, _ = self.down_proj(self.act_fn(gate_up))
        return x


class DecoderAttention(nn.Module):
    """A decoder's attention, Qwen3's by default; the other families use it with `qk_norm=False`
    (no per-head norms), their own `scaling` (Granite's attention_multiplier), their own rope
    (`rope`: base and scaling, Gemma 3's per layer type; `make_rotary` for one get_rope lacks;
    `rope_scaling` and `rotate` where the engine's rope needs restating or a query scale follows),
    none on a layer that takes no position embedding (`rotate=False`: EXAONE 4's global layers),
    their own norm class (`norm_cls`), and a head size and KV heads of their own per layer
    (`head_dim`, `num_kv_heads`: Gemma 4, whose `make_attn` holds them in the engine's one shape)."""

    norm_cls = RMSNorm
    # Projections of the query per head: 2 where each head's query comes with its output gate
    # (Qwen3.5's gated attention: q_proj holds [query, gate] per head).
    query_parts = 1

    def __init__(
        self,
        config,
        cache_config: Optional[CacheConfig] = None,
        quant_config: Optional[QuantizationConfig] = None,
        qk_norm: bool = True,
        scaling: Optional[float] = None,
        rope: Optional[Tuple[float, Optional[dict]]] = None,
        rotate: bool = True,
        head_dim: Optional[int] = None,
        num_kv_heads: Optional[int] = None,
    ) -> None:
        super().__init__()
        tp_size = get_tensor_model_parallel_world_size()
        self.total_num_heads = config.num_attention_heads
        self.total_num_kv_heads = num_kv_heads or config.num_key_value_heads
        if self.total_num_heads % tp_size or (self.total_num_kv_heads % tp_size and tp_size % self.total_num_kv_heads):
            raise ValueError(f"backport: {self.total_num_heads} / {self.total_num_kv_heads} heads do not split over {tp_size} ranks")
        self.num_heads = self.total_num_heads // tp_size
        # Fewer KV heads than ranks: each rank holds a replica (as in the engine's qwen2.py).
        self.num_kv_heads = max(1, self.total_num_kv_heads // tp_size)
        # Explicit in every Qwen3 config; hidden/heads is what transformers falls back to.
        self.head_dim = head_dim or getattr(config, "head_dim", None) or config.hidden_size // self.total_num_heads
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        bias = bool(getattr(config, "attention_bias", False))
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size,
            self.head_dim,
            self.total_num_heads * self.query_parts,
            self.total_num_kv_heads,
            bias=bias,
            quant_config=quant_config,
        )
        self.o_proj = RowParallelLinear(self.total_num_heads * self.head_dim, config.hidden_size, bias=bias, quant_config=quant_config)
        self.qk_norm, self.rotates = qk_norm, rotate
        if qk_norm:
            self.q_norm = self.norm_cls(self.head_dim, eps=config.rms_norm_eps)
            self.k_norm = self.norm_cls(self.head_dim, eps=config.rms_norm_eps)
        base, rope_scaling = rope if rope is not None else (getattr(config, "rope_theta", 1000000), self.rope_scaling(config))
        self.rotary_emb = self.make_rotary(config, base, rope_scaling)
        self.attn = self.make_attn(config, self.head_dim**-0.5 if scaling is None else scaling, cache_config, quant_config)

    def make_rotary(self, config, base: float, rope_scaling: Optional[dict]) -> nn.Module:
        return get_rope(
            self.head_dim,
            rotary_dim=self.head_dim,
            max_position=config.max_position_embeddings,
            base=base,
            rope_scaling=rope_scaling,
        )

    def make_attn(self, config, scale: float, cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig]) -> Attention:
        return Attention(
            self.num_heads, self.head_dim, scale, num_kv_heads=self.num_kv_heads, cache_config=cache_config, quant_config=quant_config
        )

    def rope_scaling(self, config) -> Optional[dict]:
        """The rope scaling handed to the engine's get_rope (Ministral 3 restates its YaRN)."""
        return getattr(config, "rope_scaling", None)

    def rotate(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """q and k after the rotary embedding (Ministral 3 also scales q by position here)."""
        return self.rotary_emb(positions, q, k)

    def _per_head(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """RMSNorm over each head's head_dim values (the weight is one head's), shape kept. The
        engine's norm kernels read their input as contiguous rows: one head a rank (one KV head,
        under tensor parallelism too) is a strided slice of the fused projection, copied here."""
        return norm(x.contiguous().view(-1, self.head_dim)).view(x.shape)

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, kv_cache: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        if self.qk_norm:
            q, k = self._per_head(self.q_norm, q), self._per_head(self.k_norm, k)
        if self.rotates:
            q, k = self.rotate(positions, q, k)
        output, _ = self.o_proj(self.attn(q, k, v, kv_cache, attn_metadata))
        return output


def fused_norm(norm: nn.Module, hidden_states: torch.Tensor, residual: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """(normed, residual stream): the engine's convention, the residual add fused into the next
    norm; the first layer's input starts the stream."""
    if residual is None:
        return norm(hidden_states), hidden_states
    return norm(hidden_states, residual)


class DecoderLayer(nn.Module):
    """A pre-norm layer: attention, then the MLP, each after its norm with the residual add fused in.
    A family changes its norms' class (`norm_cls`) and what mixes the tokens (`mix`: a hybrid
    model's linear-attention layers)."""

    norm_cls = RMSNorm

    def __init__(
        self,
        config,
        cache_config: Optional[CacheConfig] = None,
        quant_config: Optional[QuantizationConfig] = None,
        mlp=None,
        attention=None,
    ) -> None:
        super().__init__()
        self.self_attn = attention if attention is not None else DecoderAttention(config, cache_config, quant_config)
        # An MoE family passes its sparse block; a dense model has one MLP per layer.
        self.mlp = mlp if mlp is not None else GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, quant_config)
        self.input_layernorm = self.norm_cls(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = self.norm_cls(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: Optional[torch.Tensor],
        attn_metadata: AttentionMetadata,
        residual: Optional[torch.Tensor],
        *mix_args: Any,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        hidden_states, residual = fused_norm(self.input_layernorm, hidden_states, residual)
        hidden_states = self.branch_out(self.mix(positions, hidden_states, kv_cache, attn_metadata, *mix_args))
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        return self.branch_out(self.mlp(hidden_states)), residual

    def mix(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: Optional[torch.Tensor],
        attn_metadata: AttentionMetadata,
        *mix_args: Any,
    ) -> torch.Tensor:
        """The token-mixing branch (attention); `mix_args`: what the model hands a family's own."""
        return self.self_attn(positions, hidden_states, kv_cache, attn_metadata)

    def branch_out(self, x: torch.Tensor) -> torch.Tensor:
        """What an attention or MLP branch adds to the residual stream (Granite scales it)."""
        return x


def layer_index(prefix: str) -> int:
    """The index of the decoder layer make_layers builds under `prefix` ("model.layers.<index>")."""
    return int(prefix.rsplit(".", 1)[1])


class DecoderModel(nn.Module):
    """The embeddings, the layers (`layer_fn` builds a family's own), the final norm."""

    def __init__(
        self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None, layer_fn=None
    ) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, quant_config=quant_config)
        make = layer_fn or (lambda prefix: DecoderLayer(config, cache_config, quant_config))
        self.start_layer, self.end_layer, self.layers = make_layers(config.num_hidden_layers, make, prefix="model.layers")
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: List[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate_tensors: Optional[IntermediateTensors] = None,
    ):
        if get_pp_group().is_first_rank:
            hidden_states, residual = self.embed(input_ids), None
        else:
            hidden_states, residual = intermediate_tensors["hidden_states"], intermediate_tensors["residual"]
        for i in range(self.start_layer, self.end_layer):
            hidden_states, residual = self.layers[i](positions, hidden_states, kv_caches[i - self.start_layer], attn_metadata, residual)
        if not get_pp_group().is_last_rank:
            return IntermediateTensors({"hidden_states": hidden_states, "residual": residual})
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embed_tokens(input_ids)


class DecoderForCausalLM(nn.Module):
    """The engine builds it as its own models: `cls(config=, cache_config=, quant_config=)`."""

    model_cls = DecoderModel

    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__()
        self.check_config(config)
        self.config = config
        self.model = self.model_cls(config, cache_config, quant_config)
        # Tied: the output matrix is the input embeddings, and a checkpoint's lm_head is not loaded.
        # A vision-language wrapper served as text hands its own decision down in the text config
        # (text_of_vlm.tied_by_wrapper).
        self.ties_embeddings = bool(config.tie_word_embeddings)
        if self.ties_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, quant_config=quant_config)
        self.logits_processor = self.make_logits_processor(config)
        self.sampler = Sampler()

    @staticmethod
    def check_config(config) -> None:
        """Refuse what the backport would serve wrong (a family with windows overrides it)."""
        if getattr(config, "use_sliding_window", False) or "sliding_attention" in (getattr(config, "layer_types", None) or ()):
            # These layers take no window of their own (a family with windows builds them through
            # windows.py); Qwen3 slides only from max_window_layers on, and no published Qwen3 does.
            raise ValueError("backport: sliding-window layers (use_sliding_window) are not supported on this engine")

    def make_logits_processor(self, config) -> LogitsProcessor:
        return LogitsProcessor(config.vocab_size, scale=self.logits_scale(config))

    @staticmethod
    def logits_scale(config) -> float:
        return 1.0

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: List[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate_tensors: Optional[IntermediateTensors] = None,
    ):
        return self.model(input_ids, positions, kv_caches, attn_metadata, intermediate_tensors)

    def compute_logits(self, hidden_states: torch.Tensor, sampling_metadata: SamplingMetadata) -> Optional[torch.Tensor]:
        return self.logits_processor(self.lm_head, hidden_states, sampling_metadata)

    def make_empty_intermediate_tensors(self, batch_size: int, dtype: torch.dtype, device: torch.device) -> IntermediateTensors:
        size = (batch_size, self.config.hidden_size)
        return IntermediateTensors({key: torch.zeros(size, dtype=dtype, device=device) for key in ("hidden_states", "residual")})

    def sample(self, logits: torch.Tensor, sampling_metadata: SamplingMetadata) -> Optional[SamplerOutput]:
        return self.sampler(logits, sampling_metadata)

    @staticmethod
    def target(name: str) -> Tuple[str, object]:
        """(engine parameter, shard) a checkpoint tensor loads into (loading.py)."""
        return stacked_target(name)

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        # Tied: the checkpoint's lm_head, where it has one, is the embeddings again.
        load_checkpoint(self, weights, self.target, skip=lambda name: self.ties_embeddings and name.startswith("lm_head."))
