"""Whether a model fits the card: its weights and one request's KV cache on the devices of a node.

The engines size their KV space per device the same way: what gpu_memory_utilization grants
of the device, less what their profiling run found taken (the weights of the rank, the peak of
a forward pass over the token budget, memory the runtime took beside torch: NCCL, workspaces);
vLLM 0.5.5's determine_num_available_blocks and 0.11's determine_available_memory. CUDA graphs
are captured after the KV cache is allocated and come out of the share the utilization leaves.
A fixed KV space (vLLM 0.11's --kv-cache-memory-bytes; the CPU builds' VLLM_CPU_KVCACHE_SPACE)
replaces that arithmetic. What one request of --max-model-len then needs, and when the engine
refuses it, is the engine's own rule (common/memory/kv_cache.py). Weights come from the safetensors
headers (common/memory/weight_bytes.py); a directory of no weight files (config and tokenizer only, as
users look before they download) has them estimated from config.json's shapes
(common/memory/weight_estimate.py), and says so.

With the platform's arguments the start they describe is judged (tensor and pipeline parallel
sizes, --max-model-len, --gpu-memory-utilization, --dtype, --kv-cache-dtype, --quantization,
--max-num-seqs, --max-num-batched-tokens, --block-size); without any, the smallest
tensor-parallel size of the card's node that holds the model at the length the engine derives.
The peak of the profiling run is an estimate (the token budget through the widest layers, and
the sampler's float32 logits for every sequence); the rest is the engines' own arithmetic.
"""

from __future__ import annotations

from ..engine.vllm_args import int_arg, positive, switch_arg
from .kv_cache import Budget, layout, pp_stages
from .memory_tables import FFN_KEYS, GIB, HEAD_KEYS, HIDDEN_KEYS, KV_CACHE_DTYPE_BYTES, MOE_FFN_KEYS, TOPK_KEYS, TP_CANDIDATES, VOCAB_KEYS
from .weight_bytes import model_dtype_bytes, read_weights

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple

    from ..engine.profile import Profile
    from ..engine.vllm_args import UserArgs
    from ..model.modeldir import ModelDir
    from .kv_cache import Layout
    from .weight_bytes import Weights

MEMORY_ENV = "COMPAT_DEVICE_MEMORY_GIB"
NODE_ENV = "COMPAT_DEVICES_PER_NODE"
DEFAULT_BLOCK = 16
DEFAULT_SEQS = 256
DEFAULT_BATCHED = 2048


class Device:
    """One device of the card and its node, in bytes: memory (None: not the KV's concern, as
    on a CPU build), devices per node, the runtime's memory beside torch's, CUDA graphs, and a
    fixed KV space where the engine is given one."""

    def __init__(
        self, memory: Optional[int], per_node: int, non_torch: int = 0, cuda_graph: int = 0, kv_space: Optional[int] = None
    ) -> None:
        self.memory, self.per_node, self.non_torch, self.cuda_graph, self.kv_space = memory, per_node, non_torch, cuda_graph, kv_space

    @classmethod
    def of_card(cls, facts: Mapping[str, Any], env: Mapping[str, str]) -> Device:
        """The card's device (card.toml [device], in the profile), COMPAT_DEVICE_MEMORY_GIB and
        COMPAT_DEVICES_PER_NODE overriding it for another node."""
        memory = positive(env.get(MEMORY_ENV)) or float(facts["memory_gib"])
        per_node = positive(env.get(NODE_ENV), int) or int(facts["per_node"])
        return cls(
            int(memory * GIB),
            per_node,
            int(float(facts.get("non_torch_gib") or 0) * GIB),
            int(float(facts.get("cuda_graph_gib") or 0) * GIB),
        )

    @classmethod
    def cpu(cls, kv_space: int) -> Device:
        """A CPU build of the engine: its KV space is VLLM_CPU_KVCACHE_SPACE, the weights live in
        host memory beside it."""
        return cls(None, 1, kv_space=kv_space)


class Request:
    """The start the platform's arguments describe, as far as memory goes."""

    def __init__(self, user: UserArgs, facts: Mapping[str, Any]) -> None:
        self.given = bool(user.args or user.config_args)
        self.tp = int_arg(user, "--tensor-parallel-size") or 1
        self.pp = int_arg(user, "--pipeline-parallel-size") or 1
        self.max_model_len = int_arg(user, "--max-model-len")
        self.util = positive(user.value("--gpu-memory-utilization")) or float(facts.get("gpu_memory_utilization") or 0.9)
        self.dtype = user.value("--dtype")
        self.kv_dtype = (user.value("--kv-cache-dtype") or "auto").lower()
        self.quantization = user.value("--quantization")
        self.seqs = int_arg(user, "--max-num-seqs") or facts.get("max_num_seqs") or DEFAULT_SEQS
        self.batched = int_arg(user, "--max-num-batched-tokens")
        self.block = int_arg(user, "--block-size") or facts.get("block_size") or DEFAULT_BLOCK
        self.chunked = switch_arg(user, "--enable-chunked-prefill")
        self.eager = user.has("--enforce-eager")
        self.disable_window = user.has("--disable-sliding-window")
        self.kv_memory = _bytes(user.value("--kv-cache-memory-bytes")) if facts.get("kv_cache_memory_flag") else None


def _bytes(text: Optional[str]) -> Optional[int]:
    """--kv-cache-memory-bytes: a number, with k/m/g (powers of 1000) or K/M/G (of 1024)."""
    if not text:
        return None
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    scale = units.get(text[-1], 1)
    number = positive(text[:-1] if text[-1] in units else text)
    return int(number * scale) if number else None


class Judgement:
    """One start (tp, pp, length) on the device: the worst pipeline stage's figures, in bytes."""

    def __init__(self, tp: int, pp: int, length: int) -> None:
        self.tp, self.pp, self.length = tp, pp, length
        self.weights = self.activation = self.space = self.needed = 0
        self.code: Optional[str] = None  # None: it starts; "OOM": no room past the weights; "KV": refused


class Assessment:
    """What doctor reports as `memory`."""

    def __init__(self) -> None:
        self.fits: Optional[bool] = None
        self.reason = ""
        self.weights: Optional[Weights] = None
        self.lay: Optional[Layout] = None
        self.judged: Optional[Judgement] = None
        self.kv_total = 0
        self.smallest_tp: Optional[int] = None
        self.largest_len: Optional[int] = None
        self.device: Optional[Device] = None
        self.given = False
        self.derived: Optional[int] = None
        self.util = 0.0
        self.notes: List[str] = []

    def to_json(self) -> Dict[str, Any]:
        def gib(value: Optional[int]) -> Optional[float]:
            return None if value is None else round(value / GIB, 3)

        data: Dict[str, Any] = {"fits": self.fits, "code": self.judged.code if self.judged else None}
        if self.reason:
            data["reason"] = self.reason
        if self.weights is not None:
            data["weights_gib"] = gib(self.weights.total)
            data["weights_source"] = self.weights.source
            if self.weights.estimated:
                data["estimated"] = True  # no weight files: the weights from config.json's shapes
        judged, device = self.judged, self.device
        if judged is not None and device is not None:
            data.update(
                {
                    "max_model_len": judged.length,
                    "kv_gib": gib(self.kv_total),
                    "tensor_parallel_size": judged.tp,
                    "pipeline_parallel_size": judged.pp,
                    "devices": judged.tp * judged.pp,
                    "devices_per_node": device.per_node,
                    "per_device": {
                        "memory_gib": gib(device.memory),
                        "usable_gib": gib(int(device.memory * self.util)) if device.memory and device.kv_space is None else None,
                        "weights_gib": gib(judged.weights),
                        "profile_peak_gib": gib(judged.activation),
                        "non_torch_gib": gib(device.non_torch),
                        "kv_space_gib": gib(judged.space),
                        "kv_needed_gib": gib(judged.needed),
                    },
                    "smallest_tp": self.smallest_tp,
                    "largest_max_model_len": self.largest_len,
                    "judged": "the platform's arguments" if self.given else "the smallest tensor-parallel size of one node",
                }
            )
        notes = self.notes + (self.weights.problems if self.weights else []) + (self.lay.notes if self.lay else [])
        if notes:
            data["notes"] = notes
        return data


def assess(
    model: ModelDir,
    profile: Profile,
    user: UserArgs,
    env: Mapping[str, str],
    device: Optional[Device] = None,
    config_edits: Optional[Mapping[str, Any]] = None,
    per_layer: Optional[List[Tuple[int, int]]] = None,
    whole_windows: bool = False,
) -> Assessment:
    """Whether the model fits `device` (default: the card's) as the platform starts it;
    `config_edits`: what the repairs change in the config the engine reads (its head size);
    `per_layer`, `whole_windows`: what they change in how the engine keeps each layer's KV cache
    (each layer's head size and KV heads, every token of windowed layers: R10's V1 backports)."""
    from ..model.context_length import derived_length

    out = Assessment()
    facts = profile.memory
    if facts is None or (device is None and profile.device is None):
        out.reason = "the engine profile states no memory facts"
        return out
    device = device or Device.of_card(profile.device or {}, env)
    req = Request(user, facts)
    if req.kv_memory:
        device = Device(device.memory, device.per_node, device.non_torch, device.cuda_graph, req.kv_memory)
    out.device, out.given, out.util = device, req.given, req.util
    config = dict(model.json_object("config.json"), **(config_edits or {}))
    out.weights = read_weights(model, config, req.dtype, req.quantization)
    if out.weights is None:
        from .weight_estimate import estimate_weights

        out.weights, why = estimate_weights(config, req.dtype, req.quantization)
        if out.weights is None:
            out.reason = f"no weight files (metadata only), and no estimate from config.json: {why}"
            return out
    out.lay = layout(config, facts, req.disable_window or whole_windows, env, per_layer)
    rules = profile.max_model_len
    derived = derived_length(config, rules, req.disable_window)[0] if rules else None
    out.derived = int(derived) if derived else None
    length = req.max_model_len or out.derived
    if out.lay is None or not length:
        out.reason = "the config states no attention layout or length" if out.lay is None else "no --max-model-len and none in the config"
        return out
    judge = _Judge(config, facts, device, req, out.lay, out.weights)
    if req.given:
        out.judged = judge.start(req.tp, req.pp, length)
        out.smallest_tp = judge.smallest_tp(length)
    else:
        out.smallest_tp = judge.smallest_tp(length)
        out.judged = judge.start(out.smallest_tp or judge.candidates()[-1], 1, length)
    out.largest_len = judge.largest_length(out.judged.tp, out.judged.pp, out.derived or length)
    out.fits = out.judged.code is None
    out.kv_total = Budget(out.lay, str(facts["kv_check"]), req.block, 1, judge.kv_bytes, req.kv_dtype, judge.batched(length)).needed(
        length, (0, out.lay.layers)
    )
    if req.tp * req.pp > device.per_node and req.given:
        out.notes.append(f"{req.tp * req.pp} devices is more than the {device.per_node} of one node")
    if (
        device.memory
        and device.kv_space is None
        and not req.eager
        and device.memory * (1 - req.util) < device.cuda_graph + device.non_torch
    ):
        out.notes.append(
            f"--gpu-memory-utilization {req.util:g} leaves {device.memory * (1 - req.util) / GIB:.2f} GiB for CUDA graphs "
            f"(~{device.cuda_graph / GIB:g} GiB): their capture may run out of memory (--enforce-eager avoids them)"
        )
    return out


class _Judge:
    """The arithmetic of one model on one device, for any (tp, pp, length)."""

    def __init__(
        self, config: Dict[str, Any], facts: Mapping[str, Any], device: Device, req: Request, lay: Layout, weights: Weights
    ) -> None:
        from ..model.headsize import attention_config

        self.cfg = attention_config(config)[1]
        self.facts, self.device, self.req, self.lay, self.weights = facts, device, req, lay, weights
        self.check = str(facts["kv_check"])
        self.act_bytes = model_dtype_bytes(config, req.dtype)
        self.kv_bytes = KV_CACHE_DTYPE_BYTES.get(req.kv_dtype, self.act_bytes)

    def candidates(self) -> List[int]:
        """The tensor-parallel sizes of one node the engines take for this model."""
        heads = next((self.cfg[k] for k in HEAD_KEYS if isinstance(self.cfg.get(k), int) and self.cfg[k] > 0), 1)
        found = [t for t in TP_CANDIDATES if t <= self.device.per_node and self.device.per_node % t == 0 and heads % t == 0]
        return found or [1]

    def batched(self, length: int) -> int:
        """The tokens of the engine's profiling run (and of a window's reach in V1)."""
        req, facts = self.req, self.facts
        if req.batched:
            return req.batched
        if self.check == "pages":
            return length if req.chunked is False else int(facts.get("max_num_batched_tokens") or DEFAULT_BATCHED)
        long_context = facts.get("long_context_chunked_prefill")
        windowed = any(s for s in self.lay.spans) or self.cfg.get("sliding_window")
        chunked = req.chunked if req.chunked is not None else bool(long_context and length > long_context and not windowed)
        if chunked:
            return int(facts.get("chunked_prefill_tokens") or 512)
        return max(length, int(facts.get("min_batched_tokens") or DEFAULT_BATCHED))

    def activation(self, length: int, tp: int) -> int:
        """Estimated peak of the profiling run on one rank: the token budget through the widest
        layers, and the sampler's float32 logits of every sequence."""
        cfg = self.cfg
        hidden = next((cfg[k] for k in HIDDEN_KEYS if isinstance(cfg.get(k), int)), 0)
        dense = next((cfg[k] for k in FFN_KEYS if isinstance(cfg.get(k), int)), 0)
        topk = next((cfg[k] for k in TOPK_KEYS if isinstance(cfg.get(k), int)), 1)
        moe = next((cfg[k] for k in MOE_FFN_KEYS if isinstance(cfg.get(k), int)), 0)
        vocab = next((cfg[k] for k in VOCAB_KEYS if isinstance(cfg.get(k), int)), 0)
        ffn = max(dense, topk * moe)
        tokens = self.batched(length)
        seqs = min(int(self.req.seqs), tokens)
        return tokens * (4 * hidden + 2 * -(-ffn // tp)) * self.act_bytes + seqs * vocab * 4 * 2

    def start(self, tp: int, pp: int, length: int) -> Judgement:
        """The worst stage of a start with these sizes: its figures and the engine's answer."""
        budget = Budget(self.lay, self.check, int(self.req.block), tp, self.kv_bytes, self.req.kv_dtype, self.batched(length))
        stages = pp_stages(self.lay.layers, pp, self.check)
        weights = self.weights.per_device(tp, stages)
        device = self.device
        worst: Optional[Judgement] = None
        for stage, stage_weights in zip(stages, weights, strict=True):
            one = Judgement(tp, pp, length)
            one.weights, one.needed = stage_weights, budget.needed(length, stage)
            if device.kv_space is not None:
                one.space = device.kv_space
                if device.memory is not None and stage_weights + device.kv_space + device.non_torch > device.memory:
                    one.code = "OOM"
            else:
                one.activation = self.activation(length, tp)
                one.space = int((device.memory or 0) * self.req.util) - stage_weights - one.activation - device.non_torch
            if one.code is None and (one.space <= 0 or (self.check == "blocks" and budget.block_bytes(stage) > one.space)):
                one.code = "OOM"  # "No available memory for the cache blocks", or the weights themselves
            elif one.code is None and budget.refuses(length, stage, one.space):
                one.code = "KV"
            if worst is None or _worse(one, worst):
                worst = one
        return worst or Judgement(tp, pp, length)

    def smallest_tp(self, length: int) -> Optional[int]:
        return next((tp for tp in self.candidates() if self.start(tp, 1, length).code is None), None)

    def largest_length(self, tp: int, pp: int, ceiling: int) -> Optional[int]:
        """The longest --max-model-len (up to `ceiling`, what the engine derives) that starts
        with these sizes; None when not even one token does."""
        # 0.5.5's profiling run takes max(length, 2048) tokens up to its long-context mark and
        # the chunked-prefill budget past it: each side is searched on its own.
        mark = self.facts.get("long_context_chunked_prefill") if self.check == "blocks" else None
        ranges = [(1, ceiling)] if not mark or mark >= ceiling else [(1, int(mark)), (int(mark) + 1, ceiling)]
        best = None
        for low, high in ranges:
            if self.start(tp, pp, low).code is not None:
                continue
            while low < high:
                mid = (low + high + 1) // 2
                if self.start(tp, pp, mid).code is None:
                    low = mid
                else:
                    high = mid - 1
            best = low
        return best


def _worse(a: Judgement, b: Judgement) -> bool:
    rank = {"OOM": 2, "KV": 1, None: 0}
    if rank[a.code] != rank[b.code]:
        return rank[a.code] > rank[b.code]
    return a.space - a.needed < b.space - b.needed


def summary(data: Dict[str, Any]) -> str:
    """One line of a `memory` object: what a table cell or doctor's text says."""
    if data.get("fits") is None:
        return "-" if not data.get("reason") else f"not judged ({data['reason']})"
    node, length = data.get("devices_per_node"), data.get("max_model_len")
    sizes = f"TP {data['tensor_parallel_size']}" + (
        f" x PP {data['pipeline_parallel_size']}" if data.get("pipeline_parallel_size", 1) > 1 else ""
    )
    estimated = " estimated from config.json" if data.get("estimated") else ""
    weights = f"{data['weights_gib']:.3g} GiB weights{estimated}"
    if data["fits"]:
        return f"fits on {sizes} of {node} ({weights}, max-model-len {length})"
    parts = []
    if data.get("largest_max_model_len"):
        parts.append(f"{sizes} holds max-model-len {data['largest_max_model_len']}")
    if data.get("smallest_tp") and data["smallest_tp"] != data.get("tensor_parallel_size"):
        parts.append(f"TP {data['smallest_tp']} holds {length}")
    if not parts:
        parts.append(f"no TP of a node of {node} holds it ({weights})")
    elif estimated:
        parts.append(weights)
    return f"{data['code']}: " + "; ".join(parts)
