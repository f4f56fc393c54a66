"""Backports: model classes an engine generation lacks, written against that generation's layers.

One module per family (qwen3.py, ...), imported only inside the engine by the compat plugin
(compat_plugin.py) when COMPAT_BACKPORTS names its architecture; this table is what the
preflight reads (standard library only: importing it never imports torch or vLLM).

A family can have a backport per engine generation, each written against that generation's
model API (vLLM 0.5.5's: attention takes the KV cache and its metadata as arguments; the V1
engine's of 0.11: they live in a forward context). Which backport fits an engine is decided from
the engine's layer API, never from its version: each backport lists what it calls, as "file under
vllm/:Class[.method]" -> the parameter names it passes, and the profile's `layer_api`
(compat_build/snapshot_engine.py, read from the engine's own source) must hold every one of them;
the first generation whose backport fits is the one R10 names to the plugin (COMPAT_BACKPORTS
holds `architecture:module`). Adding a backport: its module, its test, one line in its
generation's table (and any API it calls that is not yet in snapshot_engine.LAYER_API there).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

ENV = "COMPAT_BACKPORTS"

# What a model written against vLLM 0.5.5's layers calls, with the keyword names it passes. The
# last two entries are the generation's calling conventions: the loader builds a model as
# `cls(config=, cache_config=, quant_config=)` (0.6.4+ passes one vllm_config), and attention
# takes the KV cache and metadata as arguments (later engines keep them in a forward context).
LAYERS_055: Dict[str, Tuple[str, ...]] = {
    "attention/layer.py:Attention": ("num_heads", "head_size", "scale", "num_kv_heads", "cache_config", "quant_config"),
    "attention/layer.py:Attention.forward": ("query", "key", "value", "kv_cache", "attn_metadata"),
    "model_executor/layers/linear.py:QKVParallelLinear": (
        "hidden_size",
        "head_size",
        "total_num_heads",
        "total_num_kv_heads",
        "bias",
        "quant_config",
    ),
    "model_executor/layers/linear.py:MergedColumnParallelLinear": ("input_size", "output_sizes", "bias", "quant_config"),
    "model_executor/layers/linear.py:RowParallelLinear": ("input_size", "output_size", "bias", "quant_config"),
    "model_executor/layers/layernorm.py:RMSNorm": ("hidden_size", "eps"),
    "model_executor/layers/layernorm.py:RMSNorm.forward_native": ("x", "residual"),
    "model_executor/layers/rotary_embedding.py:get_rope": ("head_size", "rotary_dim", "max_position", "base", "rope_scaling"),
    "model_executor/layers/activation.py:SiluAndMul": (),
    "model_executor/layers/vocab_parallel_embedding.py:VocabParallelEmbedding": ("num_embeddings", "embedding_dim", "quant_config"),
    "model_executor/layers/vocab_parallel_embedding.py:ParallelLMHead": ("num_embeddings", "embedding_dim", "quant_config"),
    "model_executor/layers/logits_processor.py:LogitsProcessor.forward": ("lm_head", "hidden_states", "sampling_metadata"),
    "model_executor/models/utils.py:make_layers": ("num_hidden_layers", "layer_fn", "prefix"),
    "model_executor/models/utils.py:is_pp_missing_parameter": ("name", "model"),
    "model_executor/models/__init__.py:ModelRegistry.register_model": ("model_arch", "model_cls"),
    "model_executor/model_loader/loader.py:build_model": ("model_class", "hf_config", "cache_config", "quant_config"),
}

# An MoE: its router, one whole linear layer on every rank, and the engine's fused expert layer
# with the mapping that stacks each expert's checkpoint tensors into it.
EXPERTS_055: Dict[str, Tuple[str, ...]] = {
    "model_executor/layers/linear.py:ReplicatedLinear": ("input_size", "output_size", "bias", "quant_config"),
    "model_executor/layers/fused_moe/layer.py:FusedMoE": (
        "num_experts",
        "top_k",
        "hidden_size",
        "intermediate_size",
        "reduce_results",
        "renormalize",
        "quant_config",
    ),
    "model_executor/layers/fused_moe/layer.py:FusedMoE.make_expert_params_mapping": (
        "ckpt_gate_proj_name",
        "ckpt_down_proj_name",
        "ckpt_up_proj_name",
        "num_experts",
    ),
}


# The engine generations' model APIs, as R10's findings name them.
MODEL_API_055 = "vLLM 0.5.5's model API"
MODEL_API_V1 = "the V1 engine's model API (vLLM 0.11)"

# Where a backport that keeps a state per sequence keeps it (`Backport.recurrent`), which decides
# what the engine must be told, per engine generation:
# - OWN_POOL (vLLM 0.5.5's model API: qwen3_5.py): a pool of the model's own, whose slots it finds
#   from the request ids the model runner hands a model with inner state (Jamba's protocol). The
#   GPU runner does so; the CPU runner is taught it (compat_patches/cpu_requests.py). A CUDA graph
#   would replay the slots of the batch it was captured with: R10 adds --enforce-eager. A cached
#   prefix has no state to continue from: R10 refuses --enable-prefix-caching.
# - ENGINE_CACHE (the V1 engine's: qwen3_5_v1.py): the engine's own mamba-style cache, sized from
#   the model's state shapes, its slots in the forward context's metadata. Nothing to teach the
#   runner, CUDA graphs as the engine captures them for its own hybrids (Qwen3-Next), and the
#   engine turns prefix caching off for a hybrid by itself.
OWN_POOL = "own pool"
ENGINE_CACHE = "engine cache"


class Backport:
    """One backported class: the module of this package that defines it and the API it calls.
    `windows`: its layers carry their own sliding windows (windows.py). `heads`: its layers have
    head sizes of their own (heads.py). What the engine must be told of them depends on its
    generation (the properties below). `recurrent`: where it keeps a state per sequence ("" when
    it keeps none; OWN_POOL or ENGINE_CACHE, above): each rank then holds whole heads' states,
    and R10 refuses what the backport cannot serve. `replaces`: the engine has the class and
    computes some configurations differently: trait -> what the engine does, in R10's words (the
    traits R10 reads: REPLACED_FOR); the backport replaces it for a model with one of them only."""

    __slots__ = ("architecture", "module", "requires", "windows", "heads", "recurrent", "replaces", "generation")

    def __init__(
        self,
        architecture: str,
        module: str,
        requires: Mapping[str, Sequence[str]],
        windows: bool = False,
        heads: bool = False,
        recurrent: str = "",
        replaces: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.architecture, self.module, self.requires = architecture, module, dict(requires)
        self.windows, self.heads, self.recurrent, self.replaces = windows, heads, recurrent, dict(replaces or {})
        self.generation = ""  # the engine generation's model API it is written for: set by its table (GENERATIONS)

    @property
    def engine_window_off(self) -> bool:
        """Whether R10 switches the engine-wide window off in the config the engine reads: vLLM
        0.5.5 applies one window read from the config to every layer, and its block manager and
        model runner cut every layer's context to it; the backport hands each windowed layer its
        own (through the layer's cache config). The V1 engine keeps that window off by itself for
        a model whose layers interleave windows (EngineArgs: is_interleaved) and takes each
        layer's own in its Attention (per_layer_sliding_window): nothing to switch."""
        return self.windows and self.generation == MODEL_API_055

    @property
    def cpu_windows(self) -> bool:
        """Whether the plugin teaches the CPU build's attention per-layer windows
        (compat_patches/cpu_windows.py, written for 0.5.5's torch_sdpa backend). The V1 engine's
        CPU attention is the stand-in harness's matter (envs/engine), not the image's: on the
        cards the engine's own backends take each layer's window."""
        return self.windows and self.generation == MODEL_API_055

    @property
    def widest_heads(self) -> bool:
        """Whether R10 writes the widest head and the most KV heads into the config the engine
        reads, each layer's own into per_layer_config: vLLM 0.5.5 sizes every layer's KV cache by
        one head_dim and one num_key_value_heads, and the backport pads the narrower layers to
        them. The V1 engine takes a KV cache spec from each Attention, at the layer's own head
        size and KV heads: nothing to write."""
        return self.heads and self.generation == MODEL_API_055

    @property
    def one_cache_group(self) -> bool:
        """Whether R10 turns the V1 engine's hybrid KV cache manager off for a model whose
        windowed and full layers hold KV caches of different page sizes. That manager (the
        default on a GPU) keeps the windowed layers' blocks apart from the full layers' to free
        them as the window moves, and takes only layers whose pages are the same size: Gemma 4's
        wider full-attention heads make it raise NotImplementedError at start (vLLM 0.11's
        get_kv_cache_groups). Off (--disable-hybrid-kv-cache-manager), every layer is one group
        with a page size of its own (UniformTypeKVCacheSpecs), as the CPU build always runs it:
        the windowed layers keep every token's keys and values, and still attend over their
        window only."""
        return self.heads and self.windows and self.generation == MODEL_API_V1

    @property
    def key(self) -> str:
        """What COMPAT_BACKPORTS names it by: the architecture and the module of its generation."""
        return f"{self.architecture}:{self.module}"

    def load(self) -> Any:
        """The class itself (imports the module: torch and vLLM, inside the engine only)."""
        return getattr(importlib.import_module(f".{self.module}", __name__), self.architecture)


# What a whole-width q/k norm under tensor parallelism sums its slices' squares with, each rank
# scaling its own slice (OLMo 2), and what experts outside the engine's FusedMoE sum their ranks'
# slices with (Gemma 4's, gated_experts.py).
REDUCE_055: Dict[str, Tuple[str, ...]] = {
    "distributed/communication_op.py:tensor_model_parallel_all_reduce": ("input_",),
    "distributed/parallel_state.py:get_tensor_model_parallel_rank": (),
}

# Gemma's layers: its RMSNorm (x * (1 + w)), the tanh-GELU gated MLP, the final logit soft-cap.
GEMMA_055: Dict[str, Tuple[str, ...]] = {
    "model_executor/layers/layernorm.py:GemmaRMSNorm": ("hidden_size", "eps"),
    "model_executor/layers/activation.py:GeluAndMul": ("approximate",),
    "model_executor/layers/logits_processor.py:LogitsProcessor": ("vocab_size", "soft_cap"),
}

# What windows.py hands each windowed layer its own window through: the engine's cache config,
# whose window every Attention built with it takes (EXAONE 4).
WINDOWS_055: Dict[str, Tuple[str, ...]] = {
    "config.py:CacheConfig": ("sliding_window",),
}

# A YaRN rope whose cos/sin factor is not the engine's own: get_rope hands `attn_factor` from the
# rope scaling to the yarn rotary, which multiplies its factor by it (Ministral 3, yarn.py).
YARN_055: Dict[str, Tuple[str, ...]] = {
    "model_executor/layers/rotary_embedding.py:YaRNScalingRotaryEmbedding": ("scaling_factor", "attn_factor", "beta_fast", "beta_slow"),
}

# Gemma 4's own: a rotary embedding whose frequencies it computes (over the engine's kernels),
# and its per-layer inputs' small projections, whole on every rank.
GEMMA4_055: Dict[str, Tuple[str, ...]] = {
    "model_executor/layers/rotary_embedding.py:RotaryEmbedding": (
        "head_size",
        "rotary_dim",
        "max_position_embeddings",
        "base",
        "is_neox_style",
        "dtype",
    ),
    "model_executor/layers/rotary_embedding.py:RotaryEmbedding._compute_inv_freq": ("base",),
    "model_executor/layers/linear.py:ReplicatedLinear": ("input_size", "output_size", "bias", "quant_config"),
}

# A model that keeps a state per sequence (Jamba's protocol on this engine): the config's
# `layers_block_type` makes the engine page KV for the attention layers only and its GPU runner
# hand the model its requests; the loader passes the scheduler config to a class with
# `has_inner_state`; the CPU runner's input preparation is where compat_patches/cpu_requests.py adds them.
RECURRENT_055: Dict[str, Tuple[str, ...]] = {
    "config.py:ModelConfig.get_layers_block_type": ("parallel_config",),
    "model_executor/models/interfaces.py:has_inner_state": ("model",),
    "worker/cpu_model_runner.py:CPUModelRunner.prepare_model_input": (
        "seq_group_metadata_list",
        "virtual_engine",
        "finished_requests_ids",
    ),
    "model_executor/layers/linear.py:ColumnParallelLinear": ("input_size", "output_size", "bias", "quant_config"),
    # Each rank's share of the per-head vectors (dt_bias, A_log) is cut by its own loader.
    "distributed/parallel_state.py:get_tensor_model_parallel_rank": (),
    "model_executor/utils.py:set_weight_attrs": ("weight", "weight_attrs"),
}

# Gemma 2's soft cap on the attention scores, handed to the engine's Attention.
SOFT_CAP_055: Dict[str, Tuple[str, ...]] = {
    "attention/layer.py:Attention": LAYERS_055["attention/layer.py:Attention"] + ("logits_soft_cap",),
}

# The configuration traits a backport can replace an engine class for (R10 reads them from
# config.json): a sliding window shorter than the context the engine serves, a rotary over a
# fraction of each head, and any configuration at all (a class the engine cannot build).
REPLACED_FOR = ("window", "partial_rotary", "always")
# What vLLM 0.5.5's classes do with a window over every layer (Mistral, Phi-3, Starcoder2).
WINDOW_BY_BLOCKS = {"window": "reads a window over every layer block by block in decode; the backport hands it to each layer"}

# The engine's own classes the model-wide window backports are built over (model_windows.py):
# Mistral and Phi-3 are its Llama class, Starcoder2 its own.
ENGINE_CLASSES_055: Dict[str, Tuple[str, ...]] = {
    "model_executor/models/llama.py:LlamaForCausalLM": ("config", "cache_config", "quant_config"),
    "model_executor/models/starcoder2.py:Starcoder2ForCausalLM": ("config", "cache_config", "quant_config"),
}

# What the families with two architectures (the text model, the published multimodal one served
# as text) and the model-wide window classes call.
GEMMA4_API = dict(LAYERS_055, **GEMMA_055, **WINDOWS_055, **GEMMA4_055, **REDUCE_055)
QWEN3_5_API = dict(LAYERS_055, **GEMMA_055, **RECURRENT_055)
MODEL_WINDOW_API = dict(LAYERS_055, **WINDOWS_055, **ENGINE_CLASSES_055)

# vLLM 0.5.5's generation (the BI-100's engine): architecture -> its backport, one line per family.
BACKPORTS_055: Dict[str, Backport] = {
    "Qwen3ForCausalLM": Backport("Qwen3ForCausalLM", "qwen3", LAYERS_055),
    "Qwen3MoeForCausalLM": Backport("Qwen3MoeForCausalLM", "qwen3_moe", dict(LAYERS_055, **EXPERTS_055)),
    "GraniteForCausalLM": Backport("GraniteForCausalLM", "granite", LAYERS_055),
    "Olmo2ForCausalLM": Backport("Olmo2ForCausalLM", "olmo2", dict(LAYERS_055, **REDUCE_055)),
    "Gemma3ForCausalLM": Backport("Gemma3ForCausalLM", "gemma3", dict(LAYERS_055, **GEMMA_055, **WINDOWS_055), windows=True),
    "Gemma3ForConditionalGeneration": Backport(
        "Gemma3ForConditionalGeneration", "gemma3", dict(LAYERS_055, **GEMMA_055, **WINDOWS_055), windows=True
    ),
    "Exaone4ForCausalLM": Backport("Exaone4ForCausalLM", "exaone4", dict(LAYERS_055, **WINDOWS_055), windows=True),
    "Ministral3ForCausalLM": Backport("Ministral3ForCausalLM", "ministral3", dict(LAYERS_055, **YARN_055)),
    "Mistral3ForConditionalGeneration": Backport("Mistral3ForConditionalGeneration", "ministral3", dict(LAYERS_055, **YARN_055)),
    "Gemma4ForCausalLM": Backport("Gemma4ForCausalLM", "gemma4", GEMMA4_API, windows=True, heads=True),
    "Gemma4ForConditionalGeneration": Backport("Gemma4ForConditionalGeneration", "gemma4", GEMMA4_API, windows=True, heads=True),
    "Qwen3_5ForCausalLM": Backport("Qwen3_5ForCausalLM", "qwen3_5", QWEN3_5_API, recurrent=OWN_POOL),
    "Qwen3_5ForConditionalGeneration": Backport("Qwen3_5ForConditionalGeneration", "qwen3_5", QWEN3_5_API, recurrent=OWN_POOL),
    "Qwen3_5MoeForCausalLM": Backport("Qwen3_5MoeForCausalLM", "qwen3_5_moe", dict(QWEN3_5_API, **EXPERTS_055), recurrent=OWN_POOL),
    "Qwen3_5MoeForConditionalGeneration": Backport(
        "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", dict(QWEN3_5_API, **EXPERTS_055), recurrent=OWN_POOL
    ),
    # Classes the engine has, replaced for the configurations it computes differently.
    "MistralForCausalLM": Backport("MistralForCausalLM", "model_windows", MODEL_WINDOW_API, windows=True, replaces=WINDOW_BY_BLOCKS),
    "Starcoder2ForCausalLM": Backport("Starcoder2ForCausalLM", "model_windows", MODEL_WINDOW_API, windows=True, replaces=WINDOW_BY_BLOCKS),
    "Phi3ForCausalLM": Backport(
        "Phi3ForCausalLM",
        "phi3",
        MODEL_WINDOW_API,
        windows=True,
        replaces=dict(
            WINDOW_BY_BLOCKS,
            partial_rotary="rotates every dimension of each head (and refuses LongRoPE's factors for a fraction of it); "
            "the backport rotates the fraction",
        ),
    ),
    "Gemma2ForCausalLM": Backport(
        "Gemma2ForCausalLM",
        "gemma2",
        dict(LAYERS_055, **GEMMA_055, **WINDOWS_055, **SOFT_CAP_055),
        windows=True,
        replaces={
            "always": "reads `hidden_act`, which the Gemma2Config of the engine's own transformers (4.55) no longer has, "
            "and would serve every layer without its window, capping the context to the window; the backport keeps each layer's"
        },
    ),
}


# What a model written against the V1 engine's model API (vLLM 0.11) calls. Its conventions: the
# loader builds a model as `cls(vllm_config=, prefix=)` (the registry below registers it), attention
# and linear attention read their caches and metadata from the forward context (no kv_cache or
# attn_metadata arguments: the engine's own layers below do), the logits processor takes no
# sampling metadata, and the engine compiles the model (support_torch_compile).
LAYERS_V1: Dict[str, Tuple[str, ...]] = {
    "model_executor/models/registry.py:_ModelRegistry.register_model": ("model_arch", "model_cls"),
    "config/__init__.py:VllmConfig.with_hf_config": ("hf_config",),
    "compilation/decorators.py:support_torch_compile": (),
    "model_executor/layers/linear.py:MergedColumnParallelLinear": ("input_size", "output_sizes", "bias", "quant_config", "prefix"),
    "model_executor/layers/layernorm.py:GemmaRMSNorm": ("hidden_size", "eps"),
    "model_executor/layers/vocab_parallel_embedding.py:VocabParallelEmbedding": ("num_embeddings", "embedding_dim"),
    "model_executor/layers/vocab_parallel_embedding.py:ParallelLMHead": ("num_embeddings", "embedding_dim", "prefix"),
    "model_executor/layers/logits_processor.py:LogitsProcessor": ("vocab_size",),
    "model_executor/layers/logits_processor.py:LogitsProcessor.forward": ("lm_head", "hidden_states"),
    "model_executor/models/utils.py:make_layers": ("num_hidden_layers", "layer_fn", "prefix"),
    "model_executor/models/utils.py:make_empty_intermediate_tensors_factory": ("keys", "hidden_size"),
    "model_executor/models/utils.py:extract_layer_index": ("layer_name",),
    "model_executor/models/utils.py:maybe_prefix": ("prefix", "name"),
    "model_executor/model_loader/weight_utils.py:default_weight_loader": ("param", "loaded_weight"),
}

# Qwen3.5 on the engine's own Qwen3-Next layers (V1 engines only: none of these is in 0.5.5): its
# Gated DeltaNet (whose projection layout the backport overrides), gated attention, model loop,
# dense MLP, and the state the engine keeps for a hybrid (its interfaces and the state shapes).
QWEN3_NEXT_V1: Dict[str, Tuple[str, ...]] = {
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet": (
        "config",
        "model_config",
        "cache_config",
        "quant_config",
        "speculative_config",
        "prefix",
    ),
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet.forward": ("hidden_states", "output"),
    "model_executor/models/qwen3_next.py:Qwen3NextGatedDeltaNet.fix_query_key_value_ordering": ("mixed_qkvz", "mixed_ba"),
    "model_executor/models/qwen3_next.py:Qwen3NextAttention": ("config", "model_config", "cache_config", "quant_config", "prefix"),
    "model_executor/models/qwen3_next.py:Qwen3NextAttention.forward": ("positions", "output", "hidden_states"),
    "model_executor/models/qwen3_next.py:Qwen3NextModel.forward": ("input_ids", "positions", "intermediate_tensors", "inputs_embeds"),
    "model_executor/models/qwen3_next.py:Qwen3NextModel.get_input_embeddings": ("input_ids",),
    "model_executor/models/qwen2_moe.py:Qwen2MoeMLP": ("hidden_size", "intermediate_size", "hidden_act", "quant_config", "prefix"),
    "model_executor/models/interfaces.py:HasInnerState": (),
    "model_executor/models/interfaces.py:IsHybrid": (),
    "model_executor/layers/mamba/mamba_utils.py:MambaStateShapeCalculator.gated_delta_net_state_shape": (
        "tp_world_size",
        "num_k_heads",
        "num_v_heads",
        "head_k_dim",
        "head_v_dim",
        "conv_kernel_size",
        "num_spec",
    ),
    "model_executor/layers/mamba/mamba_utils.py:MambaStateDtypeCalculator.gated_delta_net_state_dtype": (
        "model_dtype",
        "mamba_cache_dtype",
    ),
}

# The MoE's experts: the engine's Qwen3-Next expert block, loaded as layers/experts.py loads them.
QWEN3_NEXT_MOE_V1: Dict[str, Tuple[str, ...]] = {
    "model_executor/models/qwen3_next.py:Qwen3NextSparseMoeBlock": ("vllm_config", "prefix"),
    "model_executor/layers/fused_moe/layer.py:FusedMoE.make_expert_params_mapping": EXPERTS_055[
        "model_executor/layers/fused_moe/layer.py:FusedMoE.make_expert_params_mapping"
    ],
    "model_executor/models/utils.py:is_pp_missing_parameter": ("name", "model"),
}

QWEN3_5_V1_API = dict(LAYERS_V1, **QWEN3_NEXT_V1)
QWEN3_5_MOE_V1_API = dict(QWEN3_5_V1_API, **QWEN3_NEXT_MOE_V1)

# What Gemma 4's backport for the V1 engine calls (gemma4_v1.py, with the layers it shares with
# 0.5.5's). The first entries are the generation's conventions: the loader builds a model as
# `cls(vllm_config=, prefix=)` (initialize_model), attention takes no KV cache or metadata (the
# forward context holds them, found by the layer's name: its `prefix`) and each layer its own
# window (`per_layer_sliding_window`, which 0.5.5's Attention lacks), and the logits processor
# takes no sampling metadata.
GEMMA4_V1: Dict[str, Tuple[str, ...]] = {
    "model_executor/model_loader/utils.py:initialize_model": ("vllm_config", "prefix"),
    "attention/layer.py:Attention": (
        "num_heads",
        "head_size",
        "scale",
        "num_kv_heads",
        "cache_config",
        "quant_config",
        "per_layer_sliding_window",
        "prefix",
    ),
    "attention/layer.py:Attention.forward": ("query", "key", "value"),
    "model_executor/layers/logits_processor.py:LogitsProcessor": ("vocab_size", "soft_cap"),
    "model_executor/layers/logits_processor.py:LogitsProcessor.forward": ("lm_head", "hidden_states"),
    "model_executor/models/registry.py:_ModelRegistry.register_model": ("model_arch", "model_cls"),
    "model_executor/layers/linear.py:QKVParallelLinear": (
        "hidden_size",
        "head_size",
        "total_num_heads",
        "total_num_kv_heads",
        "bias",
        "quant_config",
        "prefix",
    ),
    "model_executor/layers/linear.py:RowParallelLinear": ("input_size", "output_size", "bias", "quant_config", "prefix"),
    "model_executor/layers/linear.py:ReplicatedLinear": ("input_size", "output_size", "bias", "quant_config", "prefix"),
    "model_executor/layers/layernorm.py:RMSNorm": ("hidden_size", "eps"),
    "model_executor/layers/rotary_embedding/__init__.py:get_rope": ("head_size", "rotary_dim", "max_position", "base"),
    "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding": (
        "head_size",
        "rotary_dim",
        "max_position_embeddings",
        "base",
        "is_neox_style",
        "dtype",
    ),
    "model_executor/layers/rotary_embedding/base.py:RotaryEmbedding._compute_inv_freq": ("base",),
    "model_executor/layers/vocab_parallel_embedding.py:VocabParallelEmbedding": (
        "num_embeddings",
        "embedding_dim",
        "quant_config",
        "prefix",
    ),
    "model_executor/layers/vocab_parallel_embedding.py:ParallelLMHead": ("num_embeddings", "embedding_dim", "quant_config", "prefix"),
    "model_executor/models/gemma3.py:Gemma3MLP": ("hidden_size", "intermediate_size", "hidden_activation", "quant_config", "prefix"),
    "model_executor/models/utils.py:make_layers": ("num_hidden_layers", "layer_fn", "prefix"),
    "model_executor/models/utils.py:extract_layer_index": ("layer_name",),
    "model_executor/models/utils.py:maybe_prefix": ("prefix", "name"),
    "model_executor/models/utils.py:is_pp_missing_parameter": ("name", "model"),
    "distributed/communication_op.py:tensor_model_parallel_all_reduce": ("input_",),
    "distributed/parallel_state.py:get_tensor_model_parallel_rank": (),
}
# What Ministral 3's (ministral3_v1.py) calls: the engine's Llama, built with its decoder layer
# class and each layer with the config it reads its rope from; the yarn rotary taking attn_factor.
MINISTRAL3_V1: Dict[str, Tuple[str, ...]] = {
    "model_executor/model_loader/utils.py:initialize_model": ("vllm_config", "prefix"),
    "model_executor/models/registry.py:_ModelRegistry.register_model": ("model_arch", "model_cls"),
    "model_executor/models/llama.py:LlamaForCausalLM": ("vllm_config", "prefix", "layer_type"),
    "model_executor/models/llama.py:LlamaDecoderLayer": ("vllm_config", "prefix", "config"),
    "model_executor/layers/rotary_embedding/__init__.py:get_rope": ("head_size", "rotary_dim", "max_position", "base", "rope_scaling"),
    "model_executor/layers/rotary_embedding/yarn_scaling_rope.py:YaRNScalingRotaryEmbedding": (
        "scaling_factor",
        "attn_factor",
        "beta_fast",
        "beta_slow",
    ),
}

# The V1 engine's generation (vLLM 0.11: nv-a100, hygon-k100): architecture -> its backport.
BACKPORTS_V1: Dict[str, Backport] = {
    "Gemma4ForCausalLM": Backport("Gemma4ForCausalLM", "gemma4_v1", GEMMA4_V1, windows=True, heads=True),
    "Gemma4ForConditionalGeneration": Backport("Gemma4ForConditionalGeneration", "gemma4_v1", GEMMA4_V1, windows=True, heads=True),
    "Ministral3ForCausalLM": Backport("Ministral3ForCausalLM", "ministral3_v1", MINISTRAL3_V1),
    "Qwen3_5ForCausalLM": Backport("Qwen3_5ForCausalLM", "qwen3_5_v1", QWEN3_5_V1_API, recurrent=ENGINE_CACHE),
    "Qwen3_5ForConditionalGeneration": Backport("Qwen3_5ForConditionalGeneration", "qwen3_5_v1", QWEN3_5_V1_API, recurrent=ENGINE_CACHE),
    "Qwen3_5MoeForCausalLM": Backport("Qwen3_5MoeForCausalLM", "qwen3_5_moe_v1", QWEN3_5_MOE_V1_API, recurrent=ENGINE_CACHE),
    "Qwen3_5MoeForConditionalGeneration": Backport(
        "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe_v1", QWEN3_5_MOE_V1_API, recurrent=ENGINE_CACHE
    ),
}

# Each generation's table, oldest first, with the model API its backports are written for.
GENERATIONS: Tuple[Tuple[str, Dict[str, Backport]], ...] = (
    (MODEL_API_055, BACKPORTS_055),
    (MODEL_API_V1, BACKPORTS_V1),
)
for _generation, _table in GENERATIONS:
    for _backport in _table.values():
        _backport.generation = _generation

# architecture -> its backports, oldest generation first: what the image ships for it.
BACKPORTS: Dict[str, Tuple[Backport, ...]] = {}
for _generation, _table in GENERATIONS:
    for _arch, _backport in _table.items():
        BACKPORTS[_arch] = BACKPORTS.get(_arch, ()) + (_backport,)


def replacing(architecture: str) -> Dict[str, str]:
    """What the backports of `architecture` replace the engine's own class for ({} where they
    serve a class the engine lacks): the first generation's table says it."""
    found = BACKPORTS.get(architecture)
    return found[0].replaces if found else {}


def by_key(key: str) -> Optional[Backport]:
    """The backport COMPAT_BACKPORTS names as `architecture:module`; a bare architecture names
    its first generation's."""
    arch, _, module = key.partition(":")
    found = BACKPORTS.get(arch, ())
    return next((b for b in found if not module or b.module == module), None)


def _missing(backport: Backport, layer_api: Mapping[str, Sequence[str]]) -> List[str]:
    out = []
    for symbol, params in sorted(backport.requires.items()):
        name = symbol.split(":", 1)[1]
        have = layer_api.get(symbol)
        out.extend([name] if have is None else [f"{name}({p})" for p in params if p not in have])
    return out


def fitting(architecture: str, layer_api: Optional[Mapping[str, Sequence[str]]]) -> Tuple[Optional[Backport], Optional[List[str]]]:
    """(the backport of `architecture` that fits the engine, or None where the image has none,
    what it calls that the engine's layer API lacks: [] when it fits, None when there is no
    layer API to tell). Where none fits, the backport that misses least, with what it misses."""
    found = BACKPORTS.get(architecture, ())
    if not found:
        return None, None
    if layer_api is None:
        return found[0], None
    misses = [(backport, _missing(backport, layer_api)) for backport in found]
    return min(misses, key=lambda pair: len(pair[1]))  # the first of the fewest: a fitting one ([]) first


def written_for(architecture: str) -> List[str]:
    """The engine generations' model APIs the image's backports of `architecture` are written for."""
    return [backport.generation for backport in BACKPORTS.get(architecture, ())]
