"""The traits of a model's configuration that decide what an engine computes for it.

The conformance matrix proves tokens for tiny models in the configurations popular checkpoints
use; a real model is covered by a cell when it is the same architecture with the same traits
(its rope scaling kind, the regime that kind runs in, partial rotary, a window shorter than the
context it is served with, soft-capping, tied embeddings, biases, q/k norms, an explicit
head_dim, the KV head layout, its experts, and the family switches in SWITCHES). A trait this
module cannot read makes no match, never a wrong one: the model's tokens are then "unproven".

Some traits depend on the start, not the file: a window bites only where the served context is
longer, and LongRoPE, YaRN and dynamic NTK each compute one thing within their original
positions and may compute another past them (the rope regime). They are judged against the
context of the start (--max-model-len, else what the config lets the engine derive) for a
model, and against the positions a conformance cell ran for the cell: a cell proves the regime
it ran in. Traits that change the same computation are judged together (JOINT): a model is
covered only by a cell that ran the same combination. Standard library only.
"""

from __future__ import annotations

from .config_values import SWITCH_MODEL_TYPES
from .headsize import attention_config, detect_head_size
from .json_numbers import integer, number, positive_int

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

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
# Rope kinds whose computation may change once a sequence passes the original positions:
# LongRoPE switches from its short factors to its long ones (transformers when the sequence is
# longer than them; vLLM 0.5.5 when a position is greater), dynamic NTK stretches its base with
# the sequence in transformers and to the longest context once in vLLM, and YaRN's interpolated
# frequencies meet positions its original training never saw. Each regime needs its own cell.
REGIME_KINDS = ("longrope", "yarn", "dynamic")
# Traits that change the same computation, judged together: a model is covered only by a cell
# that ran the same combination (a cell of LongRoPE past its original positions over the whole
# head and one within them over a fraction of it add up to no proof of the fraction past them).
# The rotary: its kind, the regime it runs in, the fraction of each head it turns. The attention
# scores: a window masks them and a soft cap bends them in the same kernel (vLLM 0.11's CPU
# attention takes both from the layer at once), on the layers the layer pattern gives a window.
JOINT = (("rope", "rope_regime", "partial_rotary"), ("window", "softcap", "layers"))
# The position keys an engine reads a model's length from (the shortest wins), as vLLM does.
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
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


def _scaling(cfg: Dict[str, Any]) -> Dict[str, Any]:
    """The rope scaling of a single-kind config (transformers 5's rope_parameters or 4.x's
    rope_scaling), {} where it has none or one per layer type."""
    for key in ("rope_parameters", "rope_scaling"):
        source = cfg.get(key)
        if isinstance(source, dict) and source and not any(isinstance(v, dict) for v in source.values()):
            if source.get("rope_type") or source.get("type"):
                return source
    return {}


def original_positions(cfg: Dict[str, Any], kind: str) -> Optional[int]:
    """The positions a rope kind of REGIME_KINDS counts as its original context, read where the
    author's transformers reads it: LongRoPE and YaRN from the scaling's
    original_max_position_embeddings (Phi-3's 4.x saves: the config's own), dynamic NTK from
    max_position_embeddings (transformers' original_max_seq_len); else max_position_embeddings.
    None where no number can be read."""
    scaling = _scaling(cfg)
    if kind.startswith("yarn") or kind == "longrope":
        for source in (scaling, cfg):
            found = positive_int(source.get("original_max_position_embeddings"))
            if found:
                return found
    return positive_int(cfg.get("max_position_embeddings"))


def rope_regime(cfg: Dict[str, Any], context: Optional[int]) -> Optional[str]:
    """For a rope kind of REGIME_KINDS: "within" where the context served stays within its
    original positions, "past" where a sequence may pass them, "unknown" where either cannot be
    read (no cell has it: unproven). None for the other kinds, which compute one thing at every
    position."""
    kind = rope_kind(cfg)
    if not any(kind.startswith(k) for k in REGIME_KINDS):
        return None
    original = original_positions(cfg, kind)
    if original is None or context is None:
        return "unknown"
    return "past" if context > original else "within"


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


# The counts that say which layers are MoE (DeepSeek's first_k_dense_replace and
# moe_layer_freq, Qwen-MoE's decoder_sparse_step and mlp_only_layers) and which have the window
# (Qwen2's max_window_layers, in a save without layer_types).
MOE_COUNTS = ("first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers")


def _moe_layers(cfg: Dict[str, Any], layers: int) -> List[int]:
    """The MoE layers as transformers' DeepSeek and Qwen-MoE decoders pick them."""
    first = integer(cfg.get("first_k_dense_replace"), 0) or 0
    freq = positive_int(cfg.get("moe_layer_freq")) or 1
    step = positive_int(cfg.get("decoder_sparse_step")) or 1
    only = cfg.get("mlp_only_layers")
    dense = {i for i in only if integer(i, 0) is not None} if isinstance(only, list) else set()
    return [i for i in range(layers) if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in dense]


def layer_pattern(cfg: Dict[str, Any], windowed: bool) -> Optional[List[str]]:
    """The kinds of layer the layer-index counts make of the model's layers, where a count says
    which are which: dense and MoE (MOE_COUNTS) and, where a window bites, full and windowed
    (max_window_layers: the layers from it on have the window). A count at or past the layer
    count leaves one kind (a first_k_dense_replace of 64 in a 27-layer model: no MoE layer),
    which a cell must have run. None where no count applies; ["unknown"] where the layer count
    cannot be read."""
    layers = positive_int(cfg.get("num_hidden_layers"))
    moe_counted = experts(cfg) is not None and any(k in cfg for k in MOE_COUNTS)
    window_counted = windowed and "max_window_layers" in cfg and not isinstance(cfg.get("layer_types"), list)
    if not (moe_counted or window_counted):
        return None
    if layers is None:
        return ["unknown"]
    kinds: List[str] = []
    if moe_counted:
        moe = len(_moe_layers(cfg, layers))
        kinds += (["dense"] if moe < layers else []) + (["moe"] if moe else [])
    boundary = integer(cfg.get("max_window_layers"), 0)
    if window_counted:
        if boundary is None:
            return ["unknown"]
        kinds += (["full"] if boundary > 0 else []) + (["window"] if boundary < layers else [])
    return kinds


def context_length(cfg: Dict[str, Any], max_model_len: Optional[str]) -> Optional[int]:
    """The length the model is served with: --max-model-len, else what its config allows, as
    every engine generation derives it (common/model/context_length.py has each one's rules):
    the shortest position key, stretched by a rope scaling's factor (YaRN's from its original
    positions) but LongRoPE's and llama3's, whose position key already is the longest."""
    if max_model_len is not None:
        try:
            return int(max_model_len)
        except ValueError:
            return None
    derived = min((n for n in (positive_int(cfg.get(k)) for k in POSITION_KEYS) if n), default=None)
    scaling = _scaling(cfg)
    kind = scaling.get("rope_type") or scaling.get("type")
    factor = number(scaling.get("factor"), 0, low_open=True)
    if derived is None or factor is None or ROPE_ALIASES.get(kind, kind) in ("default", "longrope", "llama3"):
        return derived
    if kind == "yarn" and positive_int(scaling.get("original_max_position_embeddings")):
        derived = positive_int(scaling.get("original_max_position_embeddings"))
    return int(derived * factor)


def config_traits(config: Dict[str, Any], max_model_len: Optional[str] = None) -> Dict[str, Any]:
    """The traits of `config` (a parsed config.json) served with --max-model-len `max_model_len`
    (for a conformance cell: the positions it ran)."""
    _, cfg = attention_config(config)
    model_type = cfg.get("model_type") if isinstance(cfg.get("model_type"), str) else config.get("model_type")
    head = detect_head_size(config).value
    explicit = integer(cfg.get("head_dim"))
    hidden, heads = integer(cfg.get("hidden_size")), integer(cfg.get("num_attention_heads"))
    derived = hidden // heads if hidden and heads and hidden % heads == 0 else None
    tied = cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", True))
    context = context_length(cfg, max_model_len)
    traits: Dict[str, Any] = {
        "rope": rope_kind(cfg),
        "rope_regime": rope_regime(cfg, context),
        "partial_rotary": partial_rotary(cfg, head),
        "window": window(cfg, model_type, context),
        "layers": None,
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
    traits["layers"] = layer_pattern(cfg, traits["window"] != "none")
    return traits


def joint(key: str) -> Tuple[str, ...]:
    """The traits judged together with `key` (JOINT), itself first; (key,) for a trait alone."""
    group = next((g for g in JOINT if key in g), ())
    return (key,) + tuple(k for k in group if k != key)


def groups(traits: Dict[str, Any]) -> List[Tuple[str, ...]]:
    """The traits of `traits` as they are judged: each JOINT group (those of its traits present),
    then every other trait alone, in name order."""
    grouped = [tuple(k for k in g if k in traits) for g in JOINT]
    out = [g for g in grouped if g]
    done = {k for g in out for k in g}
    return out + [(k,) for k in sorted(traits) if k not in done]


def differences(a: Dict[str, Any], b: Dict[str, Any]) -> List[str]:
    """The traits in which `a` and `b` differ, each with the traits judged together with it
    (JOINT): a difference in the rope regime is one in the rotary as a whole."""
    keys = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    return sorted({j for k in keys for j in joint(k) if j in a or j in b})
