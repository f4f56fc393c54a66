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
