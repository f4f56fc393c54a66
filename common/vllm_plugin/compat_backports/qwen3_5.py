"""Qwen3.5's text model (`Qwen3_5ForCausalLM`) for the vLLM 0.5.5 generation, from that engine's layers.

A hybrid decoder (transformers 5's modeling_qwen3_5.py): `layer_types` names each layer's token
mixer, three Gated DeltaNet layers ("linear_attention": gated_delta.py's arithmetic, a state of
fixed size per sequence) to one gated full attention ("full_attention": Qwen3's attention with
q/k norms, each head's query projected together with an output gate applied as sigmoid(gate)
after attention, and a rope over the first `partial_rotary_factor` of each head). Every norm is
zero-centred (x * (1 + w): the engine's GemmaRMSNorm); the MLP is SiLU-gated.

The per-sequence state lives in a pool this model keeps (Jamba's way on this engine): the config
class declares `layers_block_type`, so the engine pages a KV cache for the attention layers only
and its model runner hands the model the batch's request and sequence ids and the finished ones
(the GPU runner does so itself; on the CPU build the plugin's compat_patches/cpu_requests.py teaches the
CPU runner the same); sequence_state.py keeps the slots. CUDA graphs would replay one batch's
slots for every batch: R10 starts this model with --enforce-eager. A start from a cached prefix
has no state to continue from and is refused (no --enable-prefix-caching).

Under tensor parallelism each rank holds whole heads: the attention layers as Qwen3's; a Gated
DeltaNet layer its share of the key heads with the value heads they serve (value head j belongs to
key head j // (value_heads / key_heads), so a contiguous share of each stays together), which is
that share of every per-head tensor: the q, k and v parts of the fused projection and of the
convolution's channels (the engine's merged column loader cuts each part), z, a, b, dt_bias and
A_log. Each rank's recurrence and state pool cover its own heads alone; out_proj sums the ranks.

The published checkpoints are `Qwen3_5ForConditionalGeneration` (text and vision): served as text,
the vision tower and the multi-token-prediction head (`mtp.*`) not loaded.
"""

import logging
from typing import Any, Iterable, List, Optional, Tuple

import torch
from torch import nn
from vllm.attention import AttentionMetadata
from vllm.config import CacheConfig
from vllm.distributed import get_pp_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import GemmaRMSNorm
from vllm.model_executor.layers.linear import ColumnParallelLinear, MergedColumnParallelLinear, RowParallelLinear
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.layers.rotary_embedding import get_rope
from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding
from vllm.model_executor.models.utils import make_layers
from vllm.model_executor.utils import set_weight_attrs

from .layers import gated_delta
from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer, layer_index
from .layers.hybrid import FULL, LINEAR, NO_PIPELINE, check_activation, layer_types, linear_heads, without_mtp
from .layers.sequence_state import SequenceSlots
from .layers.text_of_vlm import ServedAsText, tied_by_wrapper

logger = logging.getLogger("vllm.compat_backports.qwen3_5")

# Slots the state pool starts with when the engine does not say how many sequences it runs.
DEFAULT_SLOTS = 8


class Qwen3_5Attention(DecoderAttention):
    norm_cls = GemmaRMSNorm
    query_parts = 2

    def make_rotary(self, config, base: float, rope_scaling: Optional[dict]) -> nn.Module:
        return get_rope(
            self.head_dim,
            rotary_dim=int(self.head_dim * config.partial_rotary_factor),
            max_position=config.max_position_embeddings,
            base=base,
            rope_scaling=rope_scaling,
        )

    def forward(
        self, positions: torch.Tensor, hidden_states: torch.Tensor, kv_cache: torch.Tensor, attn_metadata: AttentionMetadata
    ) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        query_gate, k, v = qkv.split([2 * self.q_size, self.kv_size, self.kv_size], dim=-1)
        query_gate = query_gate.view(-1, self.num_heads, 2 * self.head_dim)
        q, gate = query_gate[..., : self.head_dim].reshape(-1, self.q_size), query_gate[..., self.head_dim :].reshape(-1, self.q_size)
        q, k = self.rotate(positions, self._per_head(self.q_norm, q), self._per_head(self.k_norm, k))
        attended = self.attn(q, k, v, kv_cache, attn_metadata)
        output, _ = self.o_proj(attended * torch.sigmoid(gate))
        return output


class GatedNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
        return gated_delta.gated_rms_norm(x, gate, self.weight, self.eps)


class Step:
    """One forward's layout, shared by every Gated DeltaNet layer: the prompt runs (first token,
    length, state slot) and the decode tokens (from `decode_start`, one per sequence, their slots)."""

    def __init__(self, pool: "StatePool", prompts: List[Tuple[int, int, int]], decode_start: int, decode_slots: List[int]) -> None:
        self.pool, self.prompts, self.decode_start = pool, prompts, decode_start
        self.decode_slots = torch.tensor(decode_slots, dtype=torch.long, device=pool.device) if decode_slots else None


class StatePool:
    """Each Gated DeltaNet layer's states, a slot per running sequence: the convolution's last
    inputs (the model's dtype) and the recurrence's state (float32, as the reference keeps it).
    Allocated at the first forward (on the card that is the engine's memory profiling run, so the
    KV cache is sized around it) for as many sequences as the engine runs at once; grown if the
    sequences it keeps (swapped out ones too) outnumber them."""

    def __init__(self, layers: int, conv: Tuple[int, int], recurrent: Tuple[int, int, int], capacity: int) -> None:
        self.layers, self.conv_shape, self.recurrent_shape = layers, conv, recurrent
        self.slots = SequenceSlots(capacity)
        self.conv: List[torch.Tensor] = []
        self.recurrent: List[torch.Tensor] = []
        self.device = torch.device("cpu")

    def _allocate(self, capacity: int, dtype: torch.dtype, device: torch.device) -> None:
        self.device = device
        old = len(self.conv[0]) if self.conv else 0
        for i in range(self.layers):
            conv = torch.zeros((capacity, *self.conv_shape), dtype=dtype, device=device)
            recurrent = torch.zeros((capacity, *self.recurrent_shape), dtype=torch.float32, device=device)
            if old:
                conv[:old], recurrent[:old] = self.conv[i], self.recurrent[i]
                self.conv[i], self.recurrent[i] = conv, recurrent
            else:
                self.conv.append(conv)
                self.recurrent.append(recurrent)

    def step(self, requests: Any, finished: Any, meta: AttentionMetadata, tokens: int, dtype: torch.dtype, device: torch.device) -> Step:
        if not self.conv:
            self._allocate(self.slots.capacity, dtype, device)
        self.slots.release(finished or ())
        prompts, decode_start = _prompt_runs(meta)
        decodes = tokens - decode_start
        fresh = [context == 0 for _, _, context in prompts] + [False] * decodes
        try:
            plan = self.slots.plan(requests, fresh)
        except MemoryError:
            capacity = self.slots.capacity * 2 + len(fresh)
            logger.warning("Qwen3.5 backport: more sequences keep a recurrent state than the pool holds; growing it to %d", capacity)
            self._allocate(capacity, dtype, device)
            self.slots.grow(capacity)
            plan = self.slots.plan(requests, fresh)
        for slot in plan.clear:
            for conv, recurrent in zip(self.conv, self.recurrent, strict=True):
                conv[slot].zero_()
                recurrent[slot].zero_()
        for source, target in plan.copies:
            for conv, recurrent in zip(self.conv, self.recurrent, strict=True):
                conv[target].copy_(conv[source])
                recurrent[target].copy_(recurrent[source])
        runs = [(start, length, slot) for (start, length, _), slot in zip(prompts, plan.slots[: len(prompts)], strict=True)]
        return Step(self, runs, decode_start, plan.slots[len(prompts) :])


def _prompt_runs(meta: AttentionMetadata) -> Tuple[List[Tuple[int, int, int]], int]:
    """([(first token, tokens, context before them)] of the batch's prompts, where its decode
    tokens start). Prompts come first. The GPU backends give each prompt's query span
    (query_start_loc) and computed context (context_lens_tensor: chunked prefill); the CPU
    build's runs whole prompts only, its spans are the sequence lengths."""
    count = meta.num_prefills
    if not count:
        return [], 0
    starts = getattr(meta, "query_start_loc", None)
    if starts is not None:
        bounds = starts[: count + 1].tolist()
    else:
        bounds = [0]
        for length in meta.seq_lens[:count]:
            bounds.append(bounds[-1] + length)
    contexts = getattr(meta, "context_lens_tensor", None)
    contexts = contexts[:count].tolist() if contexts is not None else [0] * count
    return [(bounds[i], bounds[i + 1] - bounds[i], contexts[i]) for i in range(count)], bounds[-1]


def _head_share(param: nn.Parameter, loaded: torch.Tensor) -> None:
    """A per-value-head vector (dt_bias, A_log): this rank's heads."""
    share = param.shape[0]
    param.data.copy_(loaded.narrow(0, get_tensor_model_parallel_rank() * share, share))


class GatedDeltaNet(nn.Module):
    def __init__(self, config, index: int, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__()
        self.index = index  # its state's place in the pool
        self.key_heads, self.value_heads = linear_heads(config, get_tensor_model_parallel_world_size())  # this rank's
        self.key_dim, self.value_dim = config.linear_key_head_dim, config.linear_value_head_dim
        keys, values = config.linear_num_key_heads * self.key_dim, config.linear_num_value_heads * self.value_dim
        parts = [keys, keys, values]  # q | k | v, whole
        self.split = [self.key_heads * self.key_dim] * 2 + [self.value_heads * self.value_dim]  # this rank's
        hidden, kernel = config.hidden_size, config.linear_conv_kernel_dim
        self.in_proj_qkv = MergedColumnParallelLinear(hidden, parts, bias=False, quant_config=quant_config)
        self.in_proj_z = ColumnParallelLinear(hidden, values, bias=False, quant_config=quant_config)
        self.in_proj_b = ColumnParallelLinear(hidden, config.linear_num_value_heads, bias=False, quant_config=quant_config)
        self.in_proj_a = ColumnParallelLinear(hidden, config.linear_num_value_heads, bias=False, quant_config=quant_config)
        # The depthwise convolution's channels are the projection's: the same cut per part. Its
        # weight is kept as the checkpoint stores it ([channels, 1, kernel], Jamba's way on this
        # engine); the arithmetic is gated_delta's.
        self.conv1d = MergedColumnParallelLinear(kernel, parts, bias=False, quant_config=None)
        self.conv1d.weight.data = self.conv1d.weight.data.unsqueeze(1)
        self.dt_bias = nn.Parameter(torch.ones(self.value_heads))
        self.A_log = nn.Parameter(torch.zeros(self.value_heads))
        set_weight_attrs(self.dt_bias, {"weight_loader": _head_share})
        set_weight_attrs(self.A_log, {"weight_loader": _head_share})
        self.norm = GatedNorm(self.value_dim, config.rms_norm_eps)
        self.out_proj = RowParallelLinear(values, hidden, bias=False, quant_config=quant_config)

    def forward(self, hidden_states: torch.Tensor, step: Step) -> torch.Tensor:
        qkv, _ = self.in_proj_qkv(hidden_states)
        z, _ = self.in_proj_z(hidden_states)
        b, _ = self.in_proj_b(hidden_states)
        a, _ = self.in_proj_a(hidden_states)
        conv_states, states = step.pool.conv[self.index], step.pool.recurrent[self.index]
        weight = self.conv1d.weight.squeeze(1)
        core = torch.empty((len(hidden_states), self.value_heads, self.value_dim), dtype=torch.float32, device=hidden_states.device)
        for start, length, slot in step.prompts:
            run = slice(start, start + length)
            mixed, conv_states[slot] = gated_delta.conv_prompt(qkv[run], weight, conv_states[slot])
            q, k, g, beta, v = self._heads(mixed, a[run], b[run])
            core[run], states[slot] = gated_delta.chunked(q, k, v, g, beta, states[slot])
        if step.decode_slots is not None:
            run, slots = slice(step.decode_start, None), step.decode_slots
            mixed, conv = gated_delta.conv_step(qkv[run], weight, conv_states[slots])
            conv_states.index_copy_(0, slots, conv)
            q, k, g, beta, v = self._heads(mixed, a[run], b[run])
            core[run], state = gated_delta.recurrent(q, k, v, g, beta, states[slots])
            states.index_copy_(0, slots, state)
        gate = z.view(len(hidden_states), self.value_heads, self.value_dim)
        output, _ = self.out_proj(self.norm(core, gate).reshape(len(hidden_states), -1))
        return output

    def _heads(self, mixed: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        q, k, v = mixed.split(self.split, dim=-1)
        tokens = len(mixed)
        q, k = q.reshape(tokens, self.key_heads, self.key_dim), k.reshape(tokens, self.key_heads, self.key_dim)
        q, k, g, beta = gated_delta.prepare(q, k, a, b, self.A_log, self.dt_bias, self.value_heads // self.key_heads)
        return q, k, g, beta, v.reshape(tokens, self.value_heads, self.value_dim)


class Qwen3_5DecoderLayer(DecoderLayer):
    """The engine's pre-norm layer with Gemma's norms, whose every 4th layer (by default) mixes by
    attention and the others by Gated DeltaNet (`linear_attn`, the checkpoint's name)."""

    norm_cls = GemmaRMSNorm

    def __init__(self, config, index: int, state_index: Optional[int], cache_config, quant_config, mlp: Optional[nn.Module] = None) -> None:
        linear = state_index is not None
        attention = GatedDeltaNet(config, state_index, quant_config) if linear else Qwen3_5Attention(config, cache_config, quant_config)
        # The MoE variant passes its expert block; the dense model has one MLP per layer.
        super().__init__(config, cache_config, quant_config, mlp=mlp, attention=attention)
        if linear:
            self.linear_attn = self.self_attn
            del self.self_attn

    def mix(
        self,
        positions: torch.Tensor,
        hidden_states: torch.Tensor,
        kv_cache: Optional[torch.Tensor],
        attn_metadata: AttentionMetadata,
        step: Step,
    ) -> torch.Tensor:
        if hasattr(self, "linear_attn"):
            return self.linear_attn(hidden_states, step)
        return self.self_attn(positions, hidden_states, kv_cache, attn_metadata)


class Qwen3_5Model(nn.Module):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__()
        self.config = config
        self.types = types = layer_types(config)
        # Each Gated DeltaNet layer's place in the state pool; each attention layer's in the KV
        # caches when the engine pages them for the attention layers only (the GPU cache engine).
        self.state_index = {i: n for n, i in enumerate(i for i, t in enumerate(types) if t == LINEAR)}
        self.kv_index = {i: n for n, i in enumerate(i for i, t in enumerate(types) if t == FULL)}
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, quant_config=quant_config)
        self.start_layer, self.end_layer, self.layers = make_layers(
            config.num_hidden_layers,
            lambda prefix: self._layer(config, layer_index(prefix), cache_config, quant_config),
            prefix="model.layers",
        )
        self.norm = GemmaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def _layer(self, config, index: int, cache_config, quant_config) -> nn.Module:
        return Qwen3_5DecoderLayer(config, index, self.state_index.get(index), cache_config, quant_config)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: List[torch.Tensor], attn_metadata: AttentionMetadata, step: Step
    ) -> torch.Tensor:
        every_layer = len(kv_caches) == len(self.types)  # the CPU build pages a cache for every layer
        hidden_states, residual = self.embed_tokens(input_ids), None
        for i in range(self.start_layer, self.end_layer):
            kv = None
            if self.types[i] == FULL:
                kv = kv_caches[i] if every_layer else kv_caches[self.kv_index[i]]
            hidden_states, residual = self.layers[i](positions, hidden_states, kv, attn_metadata, residual, step)
        hidden_states, _ = self.norm(hidden_states, residual)
        return hidden_states


class Qwen3_5ForCausalLM(DecoderForCausalLM):
    """Built by the engine with `scheduler_config=` too: a model with inner state (the engine's
    `has_inner_state` protocol) learns how many sequences run at once."""

    model_cls = Qwen3_5Model
    has_inner_state = True

    def __init__(
        self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None, scheduler_config=None
    ) -> None:
        if get_pp_group().world_size > 1:
            raise ValueError(NO_PIPELINE)
        if cache_config is not None and getattr(cache_config, "enable_prefix_caching", False):
            raise ValueError(
                "Qwen3.5 backport: prefix caching cannot serve a recurrent model "
                "(a cached prefix has no recurrent state to continue from); start it without --enable-prefix-caching"
            )
        # A composite config (model_type qwen3_5) under the text class: its text part is the model.
        config = getattr(config, "text_config", config)
        super().__init__(config, cache_config, quant_config)
        capacity = getattr(scheduler_config, "max_num_seqs", None) or DEFAULT_SLOTS
        keys, values = linear_heads(config, get_tensor_model_parallel_world_size())  # this rank's
        conv_channels = 2 * keys * config.linear_key_head_dim + values * config.linear_value_head_dim
        self.pool = StatePool(
            len(self.model.state_index),
            (conv_channels, config.linear_conv_kernel_dim - 1),
            (values, config.linear_key_head_dim, config.linear_value_head_dim),
            capacity,
        )

    check_config = staticmethod(check_activation)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: List[torch.Tensor],
        attn_metadata: AttentionMetadata,
        intermediate_tensors: Any = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if "request_ids_to_seq_ids" not in kwargs:
            raise RuntimeError(
                "Qwen3.5 backport: the engine's model runner did not hand the model its requests "
                "(request_ids_to_seq_ids); without them no sequence's recurrent state can be kept"
            )
        step = self.pool.step(
            kwargs["request_ids_to_seq_ids"],
            kwargs.get("finished_requests_ids"),
            attn_metadata,
            len(input_ids),
            self.model.embed_tokens.weight.dtype,
            input_ids.device,
        )
        return self.model(input_ids, positions, kv_caches, attn_metadata, step)

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> None:
        super().load_weights(without_mtp(weights))


class Qwen3_5ForConditionalGeneration(ServedAsText, Qwen3_5ForCausalLM):
    """Qwen3.5's published checkpoints served as text."""

    def text_config(self, config: Any) -> Any:
        config.text_config.tie_word_embeddings = tied_by_wrapper(config, unstated=False)
        return config.text_config
