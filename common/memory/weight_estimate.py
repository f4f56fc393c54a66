"""What a model's weights would take, from config.json alone: for a directory of no weight files
(the metadata users look at before they download).

The tensors a decoder stores follow from its shapes: the embeddings (vocab x hidden, and an LM
head of the same size unless tied), and per decoder layer its attention (q, k, v, o of head_dim
with the KV heads of GQA; MLA's low-rank q and kv projections; a linear-attention layer's
gated delta net), its MLP (gated: 3 x hidden x intermediate; MoE: every expert's three
matrices, the router and any shared experts, on the layers the config makes sparse) and its
norms. A multimodal config's language model is its nested text_config; its vision tower is
estimated from vision_config's block shapes where it states them. Floating weights count at the
dtype the engine serves (--dtype, else the config's); a quantization_config's method and bits
size the decoder layers' linear weights as stored, with their scales (an online --quantization
as weight_bytes.py counts it). The result is weight_bytes.py's `Weights` (per decoder layer, and
outside them on the first and the last pipeline stage), so the tensor- and pipeline-parallel
split is the same as from headers. A value the estimate cannot take (not a positive integer,
implausibly large, missing) gives no estimate and says why: never a guess.
"""

from __future__ import annotations

from ..model.headsize import attention_config, detect_head_size
from ..model.json_numbers import integer
from .kv_cache import layer_kinds
from .memory_tables import (
    BLOCK_SCALE_BYTES,
    BNB_BLOCK,
    DEFAULT_NORMS_PER_LAYER,
    DENSE_LAYERS_KEYS,
    ESTIMATE_MAX,
    ESTIMATE_SOURCE,
    EXPERT_KEYS,
    EXPERTS_ONLY_QUANT,
    FALCON_TYPES,
    FFN_KEYS,
    FIRST_DENSE_KEYS,
    GATED_DELTA_NET,
    GATED_QUERY_TYPES,
    GROUP_SCALE_BYTES,
    HEAD_KEYS,
    HIDDEN_KEYS,
    KV_HEAD_KEYS,
    LAYER_KEYS,
    MOE_FFN_KEYS,
    MOE_FREQ_KEYS,
    MXFP4_BLOCK,
    NORMS_PER_LAYER,
    ONLINE_QUANT_BITS,
    QKV_BIAS_TYPES,
    QUANT_BITS_KEYS,
    QUANT_GROUP_KEYS,
    QUANT_METHOD_FORMATS,
    ROUTER_BIAS_TYPES,
    SHARED_EXPERTS_KEYS,
    SHARED_FFN_KEYS,
    SPARSE_STEP_KEYS,
    TIED_BY_DEFAULT_TYPES,
    UNGATED_MLP_TYPES,
    VISION_CONFIG_KEYS,
    VISION_DEPTH_KEYS,
    VISION_FFN_KEYS,
    VISION_HIDDEN_KEYS,
    VOCAB_KEYS,
)
from .weight_bytes import Weights, model_dtype_bytes

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Set, Tuple


class Unestimable(Exception):
    """A config value the estimate cannot take; its message says which and why."""


def estimate_weights(
    config: Dict[str, Any], dtype_arg: Optional[str] = None, quantization: Optional[str] = None
) -> Tuple[Optional[Weights], str]:
    """(the served bytes of the weights `config` describes, ""), or (None, why not)."""
    if not isinstance(config, dict) or not config:
        return None, "config.json states no model"
    try:
        return _Estimate(config, dtype_arg, quantization).weights(), ""
    except Unestimable as exc:
        return None, str(exc)


def _count(
    cfg: Dict[str, Any], keys: Sequence[str], bound: str, required: bool = True, where: str = "", zero: bool = False
) -> Optional[int]:
    """The first of `keys` the config states (null counts as unstated), as a positive integer
    (`zero`: or 0) within ESTIMATE_MAX[bound]; None when none is stated and it is not `required`."""
    for key in keys:
        if key in cfg and cfg[key] is not None:
            return _checked(cfg[key], where + key, bound, zero)
    if required:
        raise Unestimable(f"config.json states no {where}{' / '.join(keys)}")
    return None


def _checked(value: Any, name: str, bound: str, zero: bool = False) -> int:
    if integer(value, 0 if zero else 1) is None:
        raise Unestimable(f"{name} is {value!r}, not a {'non-negative' if zero else 'positive'} integer")
    if value > ESTIMATE_MAX[bound]:
        raise Unestimable(f"{name} is {value}, implausibly large")
    return value


def _pair(value: Any, name: str) -> Tuple[int, int]:
    """A block of (rows, columns) one scale covers."""
    if not isinstance(value, list) or len(value) != 2:
        raise Unestimable(f"{name} is {value!r}, not two sizes")
    return _checked(value[0], name, "group"), _checked(value[1], name, "group")


class _Quant:
    """How one linear weight (out x in) of a decoder layer is stored: bytes of its weight and
    scales, at the served dtype where it is not quantized."""

    def __init__(self, config: Dict[str, Any], cfg: Dict[str, Any], served: int, online: Optional[str]) -> None:
        self.served = served
        self.format: Optional[str] = None
        self.bits = 0
        self.group = 0
        self.block: Optional[Tuple[int, int]] = None
        self.experts_only = False
        self.g_idx = False
        self.scale_bytes = BLOCK_SCALE_BYTES
        qc = cfg.get("quantization_config", config.get("quantization_config"))
        if qc is None or qc == {}:
            if online:
                self.format, self.bits, self.experts_only = "online", ONLINE_QUANT_BITS[online], online in EXPERTS_ONLY_QUANT
            return
        if not isinstance(qc, dict):
            raise Unestimable(f"quantization_config is {type(qc).__name__}, not an object")
        method = qc.get("quant_method")
        method = method.lower() if isinstance(method, str) else None
        if qc.get("load_in_4bit") is True or qc.get("load_in_8bit") is True:
            method = "bitsandbytes"
        fmt = QUANT_METHOD_FORMATS.get(method or "")
        if fmt is None:
            bits = _count(qc, QUANT_BITS_KEYS, "bits", required=False, where="quantization_config.")
            if bits is None:
                raise Unestimable(f"quantization_config's method {method!r} states no bits the estimate can read")
            fmt = "int_groups"
        self.format = fmt
        if fmt == "float8":
            self.bits = 8
            if qc.get("weight_block_size") is not None:
                self.block = _pair(qc["weight_block_size"], "quantization_config.weight_block_size")
        elif fmt == "int_groups":
            self.bits = _count(qc, QUANT_BITS_KEYS, "bits", where="quantization_config.") or 0
            self.group = self._group(qc)
            self.g_idx = (method or "").startswith("gptq")
            self.scale_bytes = GROUP_SCALE_BYTES
        elif fmt == "bitsandbytes":
            self.bits = 4 if qc.get("load_in_4bit") is True else 8
        elif fmt == "mxfp4":
            self.bits, self.experts_only = 4, True
        else:
            self._compressed(qc)

    def _group(self, qc: Dict[str, Any]) -> int:
        """Elements of the input dimension one scale covers; 0: the whole row (-1 in configs)."""
        for key in QUANT_GROUP_KEYS:
            value = qc.get(key)
            if value == -1 or value is None and key in qc:
                return 0
            if key in qc:
                return _checked(value, "quantization_config." + key, "group")
        return 0

    def _compressed(self, qc: Dict[str, Any]) -> None:
        """compressed-tensors: the first config group's weights (num_bits, strategy, group or block)."""
        groups = qc.get("config_groups")
        first = next(iter(groups.values()), None) if isinstance(groups, dict) else None
        weights = first.get("weights") if isinstance(first, dict) else None
        if not isinstance(weights, dict):
            raise Unestimable("quantization_config.config_groups states no weights")
        self.bits = _checked(weights.get("num_bits"), "quantization_config's num_bits", "bits")
        strategy = weights.get("strategy")
        if strategy == "group":
            self.format, self.group = "int_groups", self._group(weights)
            self.scale_bytes = 1 if weights.get("type") == "float" and self.bits == 4 else GROUP_SCALE_BYTES
        elif strategy == "block":
            self.format, self.block = "float8", _pair(weights.get("block_structure"), "quantization_config's block_structure")
        else:  # tensor or channel: a scale per tensor or per output row
            self.format = "channel" if strategy == "channel" else "float8"

    def linear(self, out_dim: int, in_dim: int, expert: bool = False) -> int:
        """Bytes of one linear weight of a decoder layer, with its scales."""
        elements = out_dim * in_dim
        fmt = self.format
        if fmt is None or (self.experts_only and not expert):
            return elements * self.served
        stored = -(-elements * self.bits // 8)
        if fmt == "online":
            return stored
        if fmt == "float8":
            if self.block is None:
                return stored + BLOCK_SCALE_BYTES
            return stored + -(-out_dim // self.block[0]) * -(-in_dim // self.block[1]) * BLOCK_SCALE_BYTES
        if fmt == "channel":
            return stored + out_dim * BLOCK_SCALE_BYTES
        if fmt == "int_groups":
            groups = -(-in_dim // self.group) if self.group else 1
            scales = groups * out_dim * self.scale_bytes + -(-groups * out_dim * self.bits // 8)  # scales, packed zeros
            return stored + scales + (in_dim * 4 if self.g_idx else 0)
        if fmt == "bitsandbytes":
            return stored + (-(-elements // BNB_BLOCK) * 4 if self.bits == 4 else out_dim * 4)
        return stored + -(-elements // MXFP4_BLOCK)  # mxfp4: one E8M0 scale per 32


class _Estimate:
    def __init__(self, config: Dict[str, Any], dtype_arg: Optional[str], quantization: Optional[str]) -> None:
        key, cfg = attention_config(config)
        self.config, self.cfg, self.nested = config, cfg, key
        self.model_type = str(cfg.get("model_type") or config.get("model_type") or "")
        stated = config if ("torch_dtype" in config or "dtype" in config) else cfg
        self.served = model_dtype_bytes(stated, dtype_arg)
        online = None if (cfg.get("quantization_config") or config.get("quantization_config")) else (quantization or "").lower() or None
        self.quant = _Quant(config, cfg, self.served, online if online in ONLINE_QUANT_BITS else None)
        self.where = f"{key}." if key else ""
        self.notes: List[str] = []

    def _get(self, keys: Sequence[str], bound: str = "dimension", required: bool = True, zero: bool = False) -> int:
        """A count of the (language model's) config; 0 where it is not stated and not required."""
        return _count(self.cfg, keys, bound, required, self.where, zero) or 0

    def weights(self) -> Weights:
        cfg, served = self.cfg, self.served
        hidden = self._get(HIDDEN_KEYS)
        vocab = self._get(VOCAB_KEYS, "vocab")
        layers = self._get(LAYER_KEYS, "layers")
        out = Weights(ESTIMATE_SOURCE, estimated=True)
        out.put("first", vocab * hidden * served)
        if not self._tied():
            out.put("last", vocab * hidden * served)
        out.put("last", hidden * served)  # the final norm
        kinds = layer_kinds(cfg, self.model_type, layers)[0]
        dense = self._dense_layers(layers)
        norms = NORMS_PER_LAYER.get(self.model_type, DEFAULT_NORMS_PER_LAYER) * hidden * served
        mixer: Dict[str, int] = {}
        mlp: Dict[bool, int] = {}
        for i, kind in enumerate(kinds):
            kind = "linear" if kind == "linear" else "attention" if kind in ("full", "window", "chunked") else kind
            if kind not in mixer:
                mixer[kind] = self._linear_attention(hidden) if kind == "linear" else self._attention(hidden) if kind == "attention" else -1
                if mixer[kind] < 0:
                    raise Unestimable(f"decoder layer {i} is a {kind!r} layer, whose weights the estimate cannot size")
            sparse = i not in dense
            if sparse not in mlp:
                mlp[sparse] = self._moe(hidden) if sparse else self._mlp(hidden, self._dense_ffn(hidden))
            out.put(i, mixer[kind] + mlp[sparse] + norms)
        self._vision(out)
        out.problems.extend(self.notes)
        return out

    def _tied(self) -> bool:
        for source in (self.cfg, self.config):
            value = source.get("tie_word_embeddings")
            if value is not None:
                if not isinstance(value, bool):
                    raise Unestimable(f"tie_word_embeddings is {value!r}, not true or false")
                return value
        return self.model_type in TIED_BY_DEFAULT_TYPES

    def _attention(self, hidden: int) -> int:
        cfg, q = self.cfg, self.quant
        heads = self._get(HEAD_KEYS)
        if cfg.get("kv_lora_rank") is not None or cfg.get("qk_nope_head_dim") is not None:
            rank = self._get(("kv_lora_rank",))
            nope = self._get(("qk_nope_head_dim",))
            rope = self._get(("qk_rope_head_dim",))
            v_dim = self._get(("v_head_dim",))
            q_rank = self._get(("q_lora_rank",), required=False)
            size = q.linear(rank + rope, hidden) + rank * self.served + q.linear(heads * (nope + v_dim), rank)
            size += q.linear(hidden, heads * v_dim)
            if q_rank:
                return size + q.linear(q_rank, hidden) + q_rank * self.served + q.linear(heads * (nope + rope), q_rank)
            return size + q.linear(heads * (nope + rope), hidden)
        head = detect_head_size(self.config)
        if head.value is None:
            raise Unestimable(f"no head size: {head.problem or head.source}")
        kv = self._get(KV_HEAD_KEYS, required=False)
        if not kv and cfg.get("multi_query") is True and not (self.model_type in FALCON_TYPES and cfg.get("new_decoder_architecture")):
            kv = 1
        kv, hd = kv or heads, head.value
        gate = 2 if self.model_type in GATED_QUERY_TYPES or cfg.get("attn_output_gate") is True else 1
        size = q.linear(gate * heads * hd, hidden) + 2 * q.linear(kv * hd, hidden) + q.linear(hidden, heads * hd)
        if cfg.get("attention_bias") is True:
            size += ((heads + 2 * kv) * hd + hidden) * self.served
        elif self.model_type in QKV_BIAS_TYPES:
            size += (heads + 2 * kv) * hd * self.served
        return size

    def _linear_attention(self, hidden: int) -> int:
        """A gated delta net (Qwen3-Next, Qwen3.5): q, k, v, z, b, a in; conv; out; A, dt, norm."""
        cfg = self.cfg
        if not any(cfg.get(k) is not None for k in GATED_DELTA_NET["v_heads"]):
            return -1
        kh, vh = self._get(GATED_DELTA_NET["k_heads"]), self._get(GATED_DELTA_NET["v_heads"])
        kd, vd = self._get(GATED_DELTA_NET["k_dim"]), self._get(GATED_DELTA_NET["v_dim"])
        conv = self._get(GATED_DELTA_NET["conv"])
        q, width = self.quant, 2 * kh * kd + vh * vd
        size = q.linear(width + vh * vd, hidden) + q.linear(2 * vh, hidden) + q.linear(hidden, vh * vd)
        return size + (width * conv + 2 * vh + vd) * self.served

    def _dense_ffn(self, hidden: int) -> int:
        return self._get(FFN_KEYS, required=self.model_type not in UNGATED_MLP_TYPES) or 4 * hidden

    def _mlp(self, hidden: int, ffn: int, expert: bool = False) -> int:
        matrices = 2 if self.model_type in UNGATED_MLP_TYPES else 3
        up = self.quant.linear(ffn, hidden, expert)
        return (matrices - 1) * up + self.quant.linear(hidden, ffn, expert)

    def _experts(self) -> int:
        return self._get(EXPERT_KEYS, "experts", required=False, zero=True)

    def _dense_layers(self, layers: int) -> Set[int]:
        """The decoder layers with a dense MLP: all of them without experts; otherwise the
        first k (first_k_dense_replace), those off the sparse step or frequency, those listed."""
        cfg = self.cfg
        if not self._experts():
            return set(range(layers))
        first = self._get(FIRST_DENSE_KEYS, "layers", required=False, zero=True)
        freq = self._get(MOE_FREQ_KEYS, "layers", required=False) or 1
        step = self._get(SPARSE_STEP_KEYS, "layers", required=False) or 1
        listed = next((cfg[k] for k in DENSE_LAYERS_KEYS if cfg.get(k) is not None), [])
        if not isinstance(listed, list):
            raise Unestimable(f"{self.where}{DENSE_LAYERS_KEYS[0]} is {listed!r}, not a list of layers")
        only = {_checked(i, self.where + DENSE_LAYERS_KEYS[0], "layers", zero=True) for i in listed}
        return {i for i in range(layers) if i < first or i % freq or (i + 1) % step or i in only}

    def _moe(self, hidden: int) -> int:
        cfg, experts = self.cfg, self._experts()
        width = self._get(MOE_FFN_KEYS, required=False) or self._get(FFN_KEYS)
        size = experts * self._mlp(hidden, width, expert=True) + experts * hidden * self.served  # the router
        if self.model_type in ROUTER_BIAS_TYPES or cfg.get("topk_method") == "noaux_tc":
            size += experts * self.served
        shared = self._get(SHARED_EXPERTS_KEYS, "experts", required=False, zero=True)
        if shared:
            size += self._mlp(hidden, shared * width)
        shared_width = self._get(SHARED_FFN_KEYS, required=False, zero=True)
        if shared_width:
            size += self._mlp(hidden, shared_width) + hidden * self.served  # and its sigmoid gate
        return size

    def _vision(self, out: Weights) -> None:
        """A multimodal config's vision tower on the first stage: its blocks (attention, MLP,
        norms) from vision_config's shapes; a note where it states none."""
        if self.nested is None:
            return
        vision = next((self.config[k] for k in VISION_CONFIG_KEYS if isinstance(self.config.get(k), dict)), None)
        if vision is None:
            return
        try:
            width = _count(vision, VISION_HIDDEN_KEYS, "dimension", where="vision_config.") or 0
            depth = _count(vision, VISION_DEPTH_KEYS, "layers", where="vision_config.") or 0
            ffn = _count(vision, VISION_FFN_KEYS, "dimension", required=False, where="vision_config.") or 4 * width
        except Unestimable as exc:
            self.notes.append(f"the vision tower is not counted ({exc})")
            return
        out.put("first", depth * (4 * width * width + 2 * width * ffn + 4 * width) * self.served)
        self.notes.append("the vision tower is estimated from vision_config's blocks (its patch embedding and projector not counted)")
