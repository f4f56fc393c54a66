"""Gemma 4's text model (`Gemma4ForCausalLM`, `gemma4_text`) and its published vision-language
checkpoints (`Gemma4ForConditionalGeneration`) served as text, for the V1 engine's model API
(vLLM 0.11: nv-a100, hygon-k100).

The model is vLLM 0.5.5's backport (gemma4.py) on this engine's API: what the two share is in
layers/gemma4.py (the decoder layer with its per-layer inputs, MoE block and layer scalar, the
router, the proportional rope, the value norm, what is refused), layers/four_norms.py,
layers/gated_experts.py and layers/loading.py; the MLP is the engine's own Gemma 3 MLP
(models/gemma3.py: tanh-GELU gated, as Gemma 4's). Where the engine API differs:
- the engine builds the model as cls(vllm_config=, prefix=) and calls it without KV caches or
  attention metadata: each Attention layer finds its cache and the step's metadata in the
  forward context, by the layer name it is built with (its `prefix`);
- each layer's KV cache has its own shape (the KV cache manager takes a spec from every
  Attention and groups the layers by it): every layer attends at its own head size and KV heads
  (heads.py), with no padding to one shape and no KV head repeated, and R10 writes no head size
  into the config;
- each windowed layer hands its window to its Attention (`per_layer_sliding_window`); the engine
  keeps its model-wide window off for a model whose layers interleave windows (EngineArgs:
  is_interleaved), so R10 edits no window switch into the config either;
- a layer that shares another's keys and values (`num_kv_shared_layers`) builds no Attention: it
  calls that layer's Attention with the keys and values that layer computed in this step, which
  writes into that layer's cache the very values it wrote (as on 0.5.5) and attends over them
  with the sharing layer's queries. The engine's own way, `kv_sharing_target_layer_name`, reads
  the target's cache without writing; the CPU build's attention refuses it ("KV sharing is not
  supported in V0"), this way runs on every backend and keeps no cache for the sharing layers
  either;
- the logits processor takes no sampling metadata, and the engine samples (no `sample`).
Not served: pipeline parallelism (the class does not declare the engine's SupportsPP, and the
engine refuses it at start), embeddings in place of token ids (the per-layer inputs are looked
up by token).
"""

from typing import Iterable, Optional, Set, Tuple

import torch
from torch import nn
from vllm.attention import Attention
from vllm.config import CacheConfig, VllmConfig
from vllm.distributed import get_tensor_model_parallel_world_size
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.linear import QKVParallelLinear, RowParallelLinear
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.quantization import QuantizationConfig
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead, VocabParallelEmbedding
from vllm.model_executor.models.gemma3 import Gemma3MLP
from vllm.model_executor.models.utils import extract_layer_index, make_layers, maybe_prefix

from .layers import gemma4 as shared_gemma4
from .layers.gemma4 import Gemma4DecoderLayer, PerLayerInputs, Shared, make_rotary, per_head, value_norm
from .layers.heads import kv_producers, layer_heads
from .layers.loading import load_checkpoint, stacked_target
from .layers.text_of_vlm import ServedAsText
from .layers.windows import SLIDING, layer_windows


class Gemma4Attention(nn.Module):
    """Layer `index`'s attention at its own head size and KV heads (see the module's doc)."""

    def __init__(
        self, config, index: int, cache_config: Optional[CacheConfig], quant_config: Optional[QuantizationConfig], prefix: str
    ) -> None:
        super().__init__()
        ranks = get_tensor_model_parallel_world_size()
        head_dim, kv_heads = layer_heads(config)[index]
        heads = config.num_attention_heads
        if heads % ranks or (kv_heads % ranks and ranks % kv_heads):
            raise ValueError(f"Gemma 4 backport: layer {index}'s {heads} / {kv_heads} heads do not split over {ranks} ranks")
        # Fewer KV heads than ranks: each rank holds a replica (QKVParallelLinear's own rule).
        self.num_heads, self.num_kv_heads, self.head_dim = heads // ranks, max(1, kv_heads // ranks), head_dim
        self.q_size, self.kv_size = self.num_heads * head_dim, self.num_kv_heads * head_dim
        bias = bool(getattr(config, "attention_bias", False))
        # A layer that reuses another's keys and values, or whose values are its keys, loads no
        # projection for them (the checkpoint has none): those columns are computed and dropped.
        self.qkv_proj = QKVParallelLinear(
            config.hidden_size, head_dim, heads, kv_heads, bias=bias, quant_config=quant_config, prefix=f"{prefix}.qkv_proj"
        )
        self.o_proj = RowParallelLinear(
            heads * head_dim, config.hidden_size, bias=bias, quant_config=quant_config, prefix=f"{prefix}.o_proj"
        )
        self.reuses = kv_producers(config)[index] is not None
        self.q_norm = RMSNorm(head_dim, eps=config.rms_norm_eps)
        if not self.reuses:  # (the checkpoint holds no key norm for a layer that computes no keys)
            self.k_norm = RMSNorm(head_dim, eps=config.rms_norm_eps)
        self.eps, self.kind = config.rms_norm_eps, config.layer_types[index]
        self.rotary_emb = make_rotary(config, config.rope_parameters[self.kind], head_dim)
        self.k_is_v = bool(getattr(config, "attention_k_eq_v", False)) and self.kind != SLIDING
        # Unscaled (scaling 1.0): the q/k norms' weights carry the scale.
        self.attn = (
            None
            if self.reuses
            else Attention(
                self.num_heads,
                head_dim,
                1.0,
                num_kv_heads=self.num_kv_heads,
                cache_config=cache_config,
                quant_config=quant_config,
                per_layer_sliding_window=layer_windows(config)[index],
                prefix=f"{prefix}.attn",
            )
        )

    def forward(self, positions: torch.Tensor, hidden_states: torch.Tensor, shared: Shared) -> torch.Tensor:
        qkv, _ = self.qkv_proj(hidden_states)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = per_head(self.q_norm, q, self.head_dim)
        if self.reuses:
            q, _ = self.rotary_emb(positions, q, None)
            k, v, attn = shared[self.kind]
        else:
            v = k if self.k_is_v else v  # (the key's projection before its norm)
            k = per_head(self.k_norm, k, self.head_dim)
            v = per_head(lambda x: value_norm(x, self.eps), v, self.head_dim)
            q, k = self.rotary_emb(positions, q, k)
            attn = self.attn
            shared[self.kind] = (k, v, attn)  # the last one before the shared layers is theirs
        output, _ = self.o_proj(attn(q, k, v))
        return output


class Gemma4Model(PerLayerInputs, nn.Module):
    def __init__(self, config, vllm_config: VllmConfig, prefix: str) -> None:
        super().__init__()
        self.config = config
        quant_config, cache_config = vllm_config.quant_config, vllm_config.cache_config
        self.embed_tokens = VocabParallelEmbedding(
            config.vocab_size, config.hidden_size, quant_config=quant_config, prefix=f"{prefix}.embed_tokens"
        )
        producers = kv_producers(config)

        def layer(prefix: str) -> nn.Module:  # make_layers names the layer by keyword
            index = extract_layer_index(prefix)
            attention = Gemma4Attention(config, index, cache_config, quant_config, f"{prefix}.self_attn")
            wide = 2 if producers[index] is not None and getattr(config, "use_double_wide_mlp", False) else 1
            mlp = Gemma3MLP(config.hidden_size, config.intermediate_size * wide, config.hidden_activation, quant_config, f"{prefix}.mlp")
            return Gemma4DecoderLayer(config, attention, mlp, quant_config, prefix)

        self.start_layer, self.end_layer, self.layers = make_layers(config.num_hidden_layers, layer, prefix=f"{prefix}.layers")
        self.norm = RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        # transformers multiplies by the scale cast to the weights' dtype (bf16 rounds sqrt(hidden)).
        self.register_buffer("normalizer", torch.tensor(config.hidden_size**0.5), persistent=False)
        self.build_per_layer_inputs(config, quant_config, prefix)

    def get_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.embed_tokens(input_ids)
        return embeds * self.normalizer.to(embeds.dtype)

    def forward(
        self, input_ids: Optional[torch.Tensor], positions: torch.Tensor, inputs_embeds: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        if input_ids is None and self.config.hidden_size_per_layer_input:
            raise ValueError("Gemma 4 backport: its per-layer inputs are looked up by token id; embeddings alone are not served")
        hidden_states = inputs_embeds if inputs_embeds is not None else self.get_input_embeddings(input_ids)
        per_layer = self.per_layer_inputs(input_ids, hidden_states)
        shared: Shared = {}
        for i in range(self.start_layer, self.end_layer):
            layer_input = None if per_layer is None else per_layer[:, i]
            hidden_states = self.layers[i](positions, hidden_states, layer_input, shared)
        return self.norm(hidden_states)


class Gemma4ForCausalLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        config = self.text_config(vllm_config.model_config.hf_config)
        shared_gemma4.check_config(config)
        self.config = config
        self.model = Gemma4Model(config, vllm_config, prefix=maybe_prefix(prefix, "model"))
        # Tied: the output matrix is the input embeddings, and a checkpoint's lm_head is not loaded.
        self.ties_embeddings = bool(config.tie_word_embeddings)
        if self.ties_embeddings:
            self.lm_head = self.model.embed_tokens
        else:
            self.lm_head = ParallelLMHead(
                config.vocab_size, config.hidden_size, quant_config=vllm_config.quant_config, prefix=maybe_prefix(prefix, "lm_head")
            )
        self.logits_processor = LogitsProcessor(config.vocab_size, soft_cap=getattr(config, "final_logit_softcapping", None))

    def text_config(self, config):
        """The config the text model is built with (the wrapper served as text gives its text_config)."""
        return config

    def get_input_embeddings(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model.get_input_embeddings(input_ids)

    def forward(
        self,
        input_ids: Optional[torch.Tensor],
        positions: torch.Tensor,
        intermediate_tensors=None,
        inputs_embeds: Optional[torch.Tensor] = None,
        **kwargs,
    ) -> torch.Tensor:
        return self.model(input_ids, positions, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> Optional[torch.Tensor]:
        return self.logits_processor(self.lm_head, hidden_states)

    @staticmethod
    def target(name: str) -> Tuple[str, object]:
        stacked = shared_gemma4.target(name)
        return (stacked, None) if stacked is not None else stacked_target(name)

    def load_weights(self, weights: Iterable[Tuple[str, torch.Tensor]]) -> Set[str]:
        return load_checkpoint(self, weights, self.target, skip=lambda name: self.ties_embeddings and name.startswith("lm_head."))


class Gemma4ForConditionalGeneration(ServedAsText, Gemma4ForCausalLM):
    """Gemma 4's published checkpoints (text, vision and audio) served as text: the text model of
    the wrapper's `text_config` (ServedAsText.text_config), its weights renamed and the towers'
    skipped by ServedAsText.load_weights."""

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        # ServedAsText's constructor takes vLLM 0.5.5's arguments (config, cache_config,
        # quant_config); this engine passes one vllm_config, whose config the text class reads
        # through text_config() itself.
        Gemma4ForCausalLM.__init__(self, vllm_config=vllm_config, prefix=prefix)
