"""The traits of a model's configuration that decide what an engine computes for it.

The conformance matrix proves tokens for tiny models in the configurations popular checkpoints
use; a real model is covered by a cell when it is the same architecture with the same traits
(its rope scaling kind, partial rotary, a window shorter than the context it is served with,
soft-capping, tied embeddings, biases, q/k norms, an explicit head_dim, the KV head layout, its
experts, and the family switches in SWITCHES). A trait this module cannot read makes no match,
never a wrong one: the model's tokens are then "unproven". Standard library only.
"""

from __future__ import annotations

from .config_values import SWITCH_MODEL_TYPES
from .headsize import attention_config, detect_head_size
from .json_numbers import integer

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

# Keys whose truth switches a family's computation (Falcon's decoder layout, ALiBi, parallel
# residuals, clipped qkv); read as stated (a key the save left out is its family's default).
SWITCHES = (
    "alibi",
    "new_decoder_architecture",
    "parallel_attn",
    "use_parallel_residual",
    "clip_qkv",
    "apply_residual_connection_post_layernorm",
)
BIASES = ("attention_bias", "attention_out_bias", "mlp_bias", "qkv_bias", "use_qkv_bias", "use_bias", "bias", "add_bias_linear")
QK_NORMS = ("qk_layernorm", "use_qk_norm")
# Families whose windowed layers alternate with global ones even where config.json lists no
# layer_types (as transformers 4.55 saves Gemma 2 and Cohere 2).
INTERLEAVED = frozenset(("gemma2", "gemma3_text", "gemma3", "cohere2", "gpt_oss", "exaone4", "olmo3", "ministral", "llama4_text", "llama4"))
WINDOW_KEYS = ("sliding_window", "attention_chunk_size")
ROPE_ALIASES = {"su": "longrope", "mrope": "default"}
# KV heads of a family's other layers, beside num_key_value_heads (Gemma 4's full-attention layers).
GLOBAL_KV_KEYS = ("num_global_key_value_heads",)


def rope_kind(cfg: Dict[str, Any]) -> str:
    """default, linear, dynamic, llama3, yarn, longrope, ... or per-layer-type. YaRN whose
    max_position_embeddings is not factor x original_max_position_embeddings is its own kind:
    transformers before 4.57 then scales by the ratio of the two instead of `factor`."""
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params and all(isinstance(v, dict) for v in params.values()):
        return "per-layer-type"
    for source in (params, cfg.get("rope_scaling")):
        if isinstance(source, dict):
            kind = source.get("rope_type") or source.get("type")
            if isinstance(kind, str):
                kind = ROPE_ALIASES.get(kind, kind)
                if kind == "yarn" and not _yarn_consistent(cfg, source):
                    return "yarn(max_position!=factor*original)"
                return kind
    return "default"


def _yarn_consistent(cfg: Dict[str, Any], scaling: Dict[str, Any]) -> bool:
    original, factor, longest = scaling.get("original_max_position_embeddings"), scaling.get("factor"), cfg.get("max_position_embeddings")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (original, factor, longest)):
        return True
    return abs(longest - original * factor) < 1


def partial_rotary(cfg: Dict[str, Any], head_size: Optional[int]) -> bool:
    params = cfg.get("rope_parameters")
    factors = [
        cfg.get("partial_rotary_factor"),
        cfg.get("rotary_pct"),
        params.get("partial_rotary_factor") if isinstance(params, dict) else None,
    ]
    if any(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1 for f in factors):
        return True
    dim = integer(cfg.get("rotary_dim"))
    return bool(dim and head_size and dim < head_size)


def window(cfg: Dict[str, Any], model_type: Optional[str], context: Optional[int]) -> str:
    """none (no window, or none shorter than the served context), all, or interleaved."""
    if cfg.get("use_sliding_window") is False and model_type in SWITCH_MODEL_TYPES:
        return "none"  # these config classes drop the window (config_values.SWITCHED_OFF_BY)
    sizes = [integer(cfg.get(k)) for k in WINDOW_KEYS]
    size = min((s for s in sizes if s and s > 0), default=None)
    if size is None or (context is not None and size >= context):
        return "none"
    layer_types = cfg.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        return "interleaved" if any(t != "sliding_attention" for t in layer_types) else "all"
    if integer(cfg.get("sliding_window_pattern")) or model_type in INTERLEAVED:
        return "interleaved"
    return "all"


def _heads(cfg: Dict[str, Any]) -> Optional[int]:
    return next((integer(cfg.get(k)) for k in ("num_attention_heads", "n_head", "n_heads") if integer(cfg.get(k))), None)


def _kv_heads(cfg: Dict[str, Any]) -> Optional[int]:
    """The KV heads the config states (1 for multi_query), None where it states none."""
    if cfg.get("multi_query") is True:
        return 1
    kv = next((integer(cfg.get(k)) for k in ("num_key_value_heads", "num_kv_heads", "n_head_kv") if integer(cfg.get(k))), None)
    if kv is None:
        attn = cfg.get("attn_config")
        kv = integer(attn.get("kv_n_heads")) if isinstance(attn, dict) else None
    return kv


def kv_layout(cfg: Dict[str, Any]) -> str:
    heads, kv = _heads(cfg), _kv_heads(cfg)
    if cfg.get("multi_query") is True:
        return "mqa"
    if kv is None or heads is None or kv == heads:
        return "mha"
    return "mqa" if kv == 1 else "gqa"


def sharding(config: Dict[str, Any], tp: int) -> Optional[str]:
    """How a start at tensor-parallel size `tp` cuts the model over its ranks, where a model goes
    wrong silently when sharded: its KV heads each on one rank ("kv split") or fewer than the
    ranks, each rank holding a copy ("kv replicated"), and its experts each cut across the ranks
    ("experts split"); a family whose other layers have KV heads of their own (Gemma 4's
    global layers) names both cuts ("kv split and replicated"). None at size 1; "kv unknown"
    where no head count can be read. A TP start
    is proven only by an exact cell of the same size and the same sharding."""
    if tp <= 1:
        return None
    _, cfg = attention_config(config)
    kv = _kv_heads(cfg) or _heads(cfg)
    if kv is None:
        return "kv unknown" + (", experts split" if experts(cfg) else "")
    # Layers with KV heads of their own (Gemma 4's global layers) are cut their own way too.
    counts = [kv] + [n for n in (integer(cfg.get(k)) for k in GLOBAL_KV_KEYS) if n]
    per_layer = cfg.get("per_layer_config")  # transformers 5's save of them: layer -> overrides
    if isinstance(per_layer, dict):
        counts += [n for n in (integer(o.get("num_key_value_heads")) for o in per_layer.values() if isinstance(o, dict)) if n]
    cuts = []
    for n in counts:
        cut = "split" if n % tp == 0 else "replicated" if tp % n == 0 else f"{n} over {tp} ranks"
        if cut not in cuts:
            cuts.append(cut)
    return "kv " + " and ".join(cuts) + (", experts split" if experts(cfg) else "")


def experts(cfg: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    ffn = cfg.get("ffn_config") if isinstance(cfg.get("ffn_config"), dict) else {}
    count = next(
        (
            integer(v)
            for v in (cfg.get("num_experts"), cfg.get("num_local_experts"), cfg.get("n_routed_experts"), ffn.get("moe_num_experts"))
            if integer(v)
        ),
        None,
    )
    if not count or count < 2:
        return None
    shared = any((integer(cfg.get(k)) or 0) > 0 for k in ("n_shared_experts", "shared_expert_intermediate_size"))
    return {"shared": shared, "norm_topk_prob": cfg.get("norm_topk_prob")}


def context_length(cfg: Dict[str, Any], max_model_len: Optional[str]) -> Optional[int]:
    """The length the model is served with: --max-model-len, else what its config allows."""
    if max_model_len is not None:
        try:
            return int(max_model_len)
        except ValueError:
            return None
    return next(
        (integer(cfg.get(k)) for k in ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length") if integer(cfg.get(k))), None
    )


def config_traits(config: Dict[str, Any], max_model_len: Optional[str] = None) -> Dict[str, Any]:
    """The traits of `config` (a parsed config.json) served with --max-model-len `max_model_len`."""
    _, cfg = attention_config(config)
    model_type = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else config.get("model_type")
    head = detect_head_size(config).value
    explicit = integer(cfg.get("head_dim"))
    hidden, heads = integer(cfg.get("hidden_size")), integer(cfg.get("num_attention_heads"))
    derived = hidden // heads if hidden and heads and hidden % heads == 0 else None
    tied = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", True))
    traits: Dict[str, Any] = {
        "rope": rope_kind(cfg),
        "partial_rotary": partial_rotary(cfg, head),
        "window": window(cfg, model_type, context_length(cfg, max_model_len)),
        "softcap": any(cfg.get(k) is not None for k in ("attn_logit_softcapping", "final_logit_softcapping")),
        "tied": tied is not False,
        "biases": sorted(k for k in BIASES if cfg.get(k) is True),
        "qk_norm": any(cfg.get(k) is True for k in QK_NORMS),
        "head_dim": "explicit" if explicit and derived and explicit != derived else "derived",
        # Heads narrower than 64: kernels differ in what they take there (vLLM 0.5.5's CPU paged
        # attention refuses 32), where 64 and up is common ground.
        "narrow_heads": bool(head and head < 64),
        "kv": kv_layout(cfg),
        "experts": experts(cfg),
        "no_rope_layers": bool(cfg.get("no_rope_layers")),
        "switches": sorted(k for k in SWITCHES if cfg.get(k) not in (None, False, 0)),
    }
    return traits


def differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """The traits in which `a` and `b` differ."""
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
