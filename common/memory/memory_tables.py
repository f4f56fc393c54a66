"""The tables the memory check reads: element sizes, config keys, layer-kind spellings. Data only;
the arithmetic is in weight_bytes.py, kv_cache.py and memory_fit.py."""

from __future__ import annotations

GIB = 1 << 30

# safetensors dtype -> bits per element (the format's own names; F4/F6/E8M0 are the packed
# microscaling types newer checkpoints store).
SAFETENSORS_BITS = {
    "F64": 64,
    "F32": 32,
    "F16": 16,
    "BF16": 16,
    "I64": 64,
    "I32": 32,
    "I16": 16,
    "I8": 8,
    "U64": 64,
    "U32": 32,
    "U16": 16,
    "U8": 8,
    "BOOL": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "E8M0": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
    "C64": 64,
}
# Floating tensors the engine casts to the dtype it serves in (--dtype, else the config's);
# quantized tensors (integers, FP8, FP4) load as stored.
CAST_DTYPES = frozenset(("F64", "F32", "F16", "BF16"))
# Tensors of a quantized checkpoint that keep their stored float dtype (the engine creates them
# in float32 whatever the model dtype): scales and zero points.
KEEP_DTYPE_MARKERS = ("scale", "zero", "zeros", "g_idx", "absmax")

# --dtype (and config.json torch_dtype / dtype) -> bytes per element. "auto": the config's,
# float32 served as a 2-byte type by both engines (float16, or bfloat16 for some families).
DTYPE_BYTES = {
    "float64": 8,
    "double": 8,
    "float32": 4,
    "float": 4,
    "float16": 2,
    "half": 2,
    "bfloat16": 2,
}
AUTO_FROM_FLOAT32 = 2
# --kv-cache-dtype -> bytes per element; "auto" is the served dtype.
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "bfloat16": 2, "float16": 2, "half": 2, "float": 4}
# vLLM 0.11's DeepSeek FP8 MLA cache: a whole token's latent of one layer in 656 bytes.
FP8_DS_MLA = "fp8_ds_mla"
FP8_DS_MLA_TOKEN_BYTES = 656

# --quantization methods that quantize an unquantized checkpoint as it loads (online), and the
# bits a quantized weight then takes; `experts` methods touch only MoE expert weights.
ONLINE_QUANT_BITS = {"fp8": 8, "ptpc_fp8": 8, "bitsandbytes": 4, "experts_int8": 8}
EXPERTS_ONLY_QUANT = frozenset(("experts_int8",))

# Weight files the engines skip although they match their patterns (vLLM's own list).
NOT_WEIGHTS = frozenset(("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"))
SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"
# Mistral's own format beside the Hugging Face one: the engines load one or the other.
CONSOLIDATED_PREFIX = "consolidated"
# Headers read for one model at most (the largest checkpoints have a few hundred shards).
MAX_WEIGHT_FILES = 4096

# Config keys, in the engines' order of precedence.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
HEAD_KEYS = ("num_attention_heads", "n_head", "n_heads", "num_heads")
KV_HEAD_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
HIDDEN_KEYS = ("hidden_size", "n_embd", "d_model")
FFN_KEYS = ("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim")
MOE_FFN_KEYS = ("moe_intermediate_size", "expert_intermediate_size")
TOPK_KEYS = ("num_experts_per_tok", "moe_topk", "top_k", "num_selected_experts")
VOCAB_KEYS = ("vocab_size", "padded_vocab_size")
# Falcon's original types: multi_query means one KV head only without the new decoder layout.
FALCON_TYPES = frozenset(("falcon", "RefinedWeb", "RefinedWebModel"))

# Per-layer kinds as configs spell them -> what the KV cache holds for such a layer: "full"
# (every token), "window" (the window's tokens), "chunked" (one attention chunk), "linear"
# (one fixed state per sequence), "none" (no cache).
LAYER_TYPE_KINDS = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "hybrid": "full",
    "sliding_attention": "window",
    "local": "window",
    "chunked_attention": "chunked",
    "linear_attention": "linear",
    "mamba": "linear",
    "mamba2": "linear",
    "conv": "linear",
    "mlp": "none",
    "moe": "none",
}
# Nemotron-H's hybrid_override_pattern, one character a layer.
PATTERN_KINDS = {"M": "linear", "*": "full", "-": "none", "E": "none"}
# Families whose windowed layers alternate with global ones where config.json lists no
# layer_types: layer i is global when (i + 1) % period == 0 (transformers' own rule);
# sliding_window_pattern, where the config states one, wins.
WINDOW_PERIODS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6, "cohere2": 4}
# Families known to interleave windows whose period this table cannot say: every layer is then
# counted as global (the larger cache; never a smaller one than the engine's).
INTERLEAVED_UNKNOWN = frozenset(("gpt_oss", "exaone4", "olmo3", "ministral", "llama4", "llama4_text"))

# Linear-attention (and state-space) layers hold one state per sequence; its size from the
# config, per family of formula (vLLM's MambaStateShapeCalculator). Each entry: the keys that
# spell each quantity, first found wins.
GATED_DELTA_NET = {
    "k_heads": ("linear_num_key_heads",),
    "v_heads": ("linear_num_value_heads",),
    "k_dim": ("linear_key_head_dim",),
    "v_dim": ("linear_value_head_dim",),
    "conv": ("linear_conv_kernel_dim",),
}
MAMBA2 = {
    "heads": ("mamba_num_heads", "mamba_n_heads"),
    "head_dim": ("mamba_head_dim", "mamba_d_head"),
    "state": ("ssm_state_size", "mamba_d_state", "state_size"),
    "groups": ("n_groups", "mamba_n_groups"),
    "conv": ("conv_kernel", "mamba_d_conv"),
}
MAMBA1 = {
    "state": ("mamba_d_state", "state_size"),
    "conv": ("mamba_d_conv", "conv_kernel"),
    "expand": ("mamba_expand", "expand"),
}
# MiniMax's lightning attention: a heads x head_dim x head_dim state kept in float32.
LIGHTNING_TYPES = frozenset(("minimax", "minimax_text_01", "minimax_m1"))
LIGHTNING_STATE_BYTES = 4

# Tensor-parallel sizes the node is searched over: the divisors of its device count that the
# model's attention heads divide (both engines refuse any other).
TP_CANDIDATES = (1, 2, 4, 8, 16, 32)
# Tensors of these names load on the first pipeline stage (embeddings, vision towers); any
# other tensor outside the decoder layers loads on the last (final norm, LM head).
FIRST_STAGE_MARKERS = ("embed", "wte", "wpe", "vision", "visual", "image", "mm_projector", "multi_modal")

# -- the estimate from config.json (common/memory/weight_estimate.py), for a directory of no weights --

ESTIMATE_SOURCE = "estimated from config.json"
# Config keys of what the estimate reads, in the engines' order of precedence (beside the keys above).
EXPERT_KEYS = ("num_local_experts", "n_routed_experts", "num_experts", "moe_num_experts")
SHARED_EXPERTS_KEYS = ("n_shared_experts", "num_shared_experts")  # shared experts of the routed width
SHARED_FFN_KEYS = ("shared_expert_intermediate_size",)  # one shared expert of its own width, sigmoid-gated
VISION_CONFIG_KEYS = ("vision_config", "vision_tower_config", "visual")
VISION_HIDDEN_KEYS = ("hidden_size", "embed_dim", "width")
VISION_DEPTH_KEYS = ("depth", "num_hidden_layers", "num_layers", "layers")
VISION_FFN_KEYS = ("intermediate_size", "mlp_dim")
# Which decoder layers hold experts: the first k dense (DeepSeek), every n-th from the first k
# (DeepSeek's moe_layer_freq: i % n == 0), every n-th counted from one (Qwen-MoE's
# decoder_sparse_step, Llama 4's interleave_moe_layer_step: (i + 1) % n == 0), a list of dense ones.
FIRST_DENSE_KEYS = ("first_k_dense_replace",)
MOE_FREQ_KEYS = ("moe_layer_freq",)
SPARSE_STEP_KEYS = ("decoder_sparse_step", "interleave_moe_layer_step")
DENSE_LAYERS_KEYS = ("mlp_only_layers",)
# Families whose MLP is two matrices (up, down), not the gated three; their width is 4 x hidden
# where the config leaves it unset (GPT-2's n_inner: null).
UNGATED_MLP_TYPES = FALCON_TYPES | {"gpt2", "gpt_bigcode", "gpt_neox", "gptj", "bloom", "opt", "phi", "starcoder2", "mpt", "codegen"}
# Families whose input embedding doubles as the LM head when config.json does not say
# (tie_word_embeddings defaults to true in their config classes).
TIED_BY_DEFAULT_TYPES = frozenset(("gemma", "gemma2", "gemma3", "gemma3_text", "gpt2", "gpt_bigcode", "gptj", "bloom", "opt", "phi"))
# Families with biases on q, k and v (attention_bias: true adds them on o as well).
QKV_BIAS_TYPES = frozenset(("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl", "qwen2_vl_text", "qwen2_5_vl_text"))
# Families whose full-attention query projection also yields a sigmoid output gate (twice the width).
GATED_QUERY_TYPES = frozenset(("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"))
# Norms of one decoder layer, where a family has more than the two (before attention and MLP).
NORMS_PER_LAYER = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4, "olmo2": 2, "cohere": 1, "cohere2": 1}
DEFAULT_NORMS_PER_LAYER = 2
# Families whose router has a per-expert score correction bias (DeepSeek-V3's noaux_tc top-k).
ROUTER_BIAS_TYPES = frozenset(("deepseek_v3", "kimi_k2"))
# Bounds past which a config value is a corrupt one, not a model (the largest published are far below).
ESTIMATE_MAX = {"dimension": 1 << 20, "vocab": 1 << 24, "layers": 1 << 12, "experts": 1 << 14, "bits": 64, "group": 1 << 20}
# quantization_config's quant_method -> how its weights are stored: "float8" (one byte a weight,
# float32 scales per block or per tensor), "int_groups" (packed integers with float16 scales and
# packed zeros per group; GPTQ also a g_idx), "bitsandbytes", "compressed" (compressed-tensors'
# config_groups), "mxfp4" (experts in 4 bits with a one-byte scale per 32).
QUANT_METHOD_FORMATS = {
    "fp8": "float8",
    "fbgemm_fp8": "float8",
    "ptpc_fp8": "float8",
    "gptq": "int_groups",
    "gptq_marlin": "int_groups",
    "awq": "int_groups",
    "awq_marlin": "int_groups",
    "bitsandbytes": "bitsandbytes",
    "compressed-tensors": "compressed",
    "compressed_tensors": "compressed",
    "mxfp4": "mxfp4",
}
QUANT_BITS_KEYS = ("bits", "w_bit", "weight_bits", "num_bits")
QUANT_GROUP_KEYS = ("group_size", "q_group_size")
# The storage of int_groups scales (float16) and of float8 / compressed block and channel scales (float32).
GROUP_SCALE_BYTES = 2
BLOCK_SCALE_BYTES = 4
BNB_BLOCK = 64  # bitsandbytes' 4-bit blocks, each with a float32 absmax
MXFP4_BLOCK = 32
