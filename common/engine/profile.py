"""A card's engine profile: what its vLLM and transformers support.

Baked into the image as JSON at build time from the image's own packages (the truth), and kept
in the repo under profiles/ for local preflights, generated from build_matrix.toml and a real
engine install.
"""

from __future__ import annotations


import json
import os

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, FrozenSet, List, Optional, Tuple

PROFILE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "profiles")
IMAGE_CARD_FILE = os.path.join(PROFILE_DIR, "IMAGE_CARD")


def _optional_set(values: Any) -> Optional[FrozenSet[str]]:
    return frozenset(values) if values else None


class Profile:
    def __init__(self, data: Dict[str, Any]) -> None:
        engine = data["engine"]
        self.card = str(data["card"])
        self.vllm_version = str(data["vllm_version"])
        self.transformers_version = str(data["transformers_version"])
        self.head_sizes: Tuple[int, ...] = tuple(int(x) for x in data["attention"]["head_sizes"])
        self.head_size_policy = str(data["attention"]["head_size_policy"])
        # None: the profile was made without the card's vLLM at hand (known only inside its image).
        self.architectures: Optional[FrozenSet[str]] = None if engine["architectures"] is None else frozenset(engine["architectures"])
        self.tokenizer_classes: FrozenSet[str] = frozenset(engine["tokenizer_classes"])
        self.tokenizer_model_types: FrozenSet[str] = frozenset(engine["tokenizer_model_types"])
        self.model_type_architectures: Dict[str, str] = dict(engine["model_type_architectures"])
        self.transformers_architectures: FrozenSet[str] = frozenset(engine["transformers_architectures"])
        # `vllm serve` flags as EngineArgs field names (hf_overrides, rope_theta, ...); None: unknown.
        raw_args = engine.get("engine_args")
        self.engine_args: Optional[FrozenSet[str]] = None if raw_args is None else frozenset(raw_args)
        # The facts below are None where the profile cannot say (a profile made before they were
        # recorded, or without the engine's vLLM at hand): rules then say "unverified", never guess.
        self.transformers_backend: Optional[bool] = engine.get("transformers_backend")
        self.backend_architectures: FrozenSet[str] = frozenset(engine.get("backend_compatible_architectures") or ())
        self.quantization_methods: Optional[FrozenSet[str]] = _optional_set(engine.get("quantization_methods"))
        self.head_dim_none_fallback: Optional[bool] = engine.get("head_dim_none_fallback")
        self.null_head_dim_model_types: FrozenSet[str] = frozenset(engine.get("null_head_dim_model_types") or ())
        self.config_model_types: Optional[FrozenSet[str]] = _optional_set(engine.get("config_model_types"))
        self.serve_config_file: Optional[bool] = engine.get("serve_config_file")
        # model_type -> the engine's own config class, for the model types whose config.json the
        # engine reads itself, without the model's code and whatever its auto_map says (vLLM
        # 0.11 asks its own registry before transformers; 0.5.5 asks transformers first, which
        # refuses RefinedWeb). None: the profile cannot say.
        raw_own = engine.get("own_config_classes")
        self.own_config_classes: Optional[Dict[str, str]] = None if raw_own is None else dict(raw_own)
        # Whether the engine runs `vllm.general_plugins` entry points, and has the loader's weight
        # iterator (DefaultModelLoader._get_weights_iterator) R8's plugin wraps.
        self.general_plugins: Optional[bool] = engine.get("general_plugins")
        self.weights_iterator_hook: Optional[bool] = engine.get("weights_iterator_hook")
        # Whether the engine is a CPU build (its version says so), and whether its fused MoE
        # layer has a CPU path (R11). None: unknown.
        self.cpu_build: Optional[bool] = engine.get("cpu_build")
        self.fused_moe_cpu: Optional[bool] = engine.get("fused_moe_cpu")
        # The engine API the backports (R10) call: "file:Class[.method]" -> its parameter names,
        # read from the engine's source (compat_build/snapshot_engine.py). None: not recorded.
        raw_api = engine.get("layer_api")
        self.layer_api: Optional[Dict[str, FrozenSet[str]]] = (
            None if not isinstance(raw_api, dict) else {str(k): frozenset(v) for k, v in raw_api.items() if isinstance(v, list)}
        )
        # model_type -> its config class's attribute_map (another name -> the key it stores): R5
        # restores a key transformers 5 renamed where the engine's class does not map it. None: unknown.
        raw_maps = engine.get("config_attribute_maps")
        self.config_attribute_maps: Optional[Dict[str, Dict[str, str]]] = (
            None if not isinstance(raw_maps, dict) else {str(k): dict(v) for k, v in raw_maps.items() if isinstance(v, dict)}
        )
        # How the engine derives the longest context it serves a model with (the config keys, the
        # rope scalings that stretch it, the model types whose window caps it): CTX. None: unknown.
        raw_len = engine.get("max_model_len")
        self.max_model_len: Optional[Dict[str, Any]] = dict(raw_len) if isinstance(raw_len, dict) and raw_len.get("keys") else None
        # How the engine sizes its KV cache and refuses a --max-model-len it cannot hold (the
        # check, its defaults, the KV layouts it knows): common/memory/memory_fit.py. None: unknown.
        raw_memory = engine.get("memory")
        self.memory: Optional[Dict[str, Any]] = dict(raw_memory) if isinstance(raw_memory, dict) and raw_memory.get("kv_check") else None
        # One device of the card and its node (memory_gib, per_node, the runtime's overheads).
        raw_device = data.get("device")
        self.device: Optional[Dict[str, Any]] = dict(raw_device) if isinstance(raw_device, dict) and raw_device.get("memory_gib") else None
        reads = engine.get("reads") if isinstance(engine.get("reads"), dict) else {}
        self.reads_rope_parameters: Optional[bool] = reads.get("rope_parameters")
        self.reads_dtype_key: Optional[bool] = reads.get("dtype")
        self.reads_extra_special_tokens_list: Optional[bool] = reads.get("extra_special_tokens_list")
        # Whether a missing preprocessor_config.json falls back to the `image_processor` entry of a
        # nested processor_config.json (transformers 4.57 and 5.x do; 4.55 does not): R6.
        self.reads_nested_processor_config: Optional[bool] = reads.get("nested_processor_config")

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> Profile:
        return cls(data)

    def knows_tokenizer_class(self, name: str) -> bool:
        """AutoTokenizer resolves `X` and `XFast` alike, so either spelling counts."""
        base = name[:-4] if name.endswith("Fast") else name
        return name in self.tokenizer_classes or base in self.tokenizer_classes or (base + "Fast") in self.tokenizer_classes

    def accepts(self, field: str) -> Optional[bool]:
        """Whether this engine's `vllm serve` has the flag of EngineArgs field `field` (None: unknown)."""
        return None if self.engine_args is None else field in self.engine_args

    def servable_architectures(self) -> Optional[FrozenSet[str]]:
        """Classes this engine starts: its registry, plus what its Transformers backend takes
        (vLLM 0.11 falls back to it by itself). None: the profile has no registry snapshot."""
        if self.architectures is None:
            return None
        if self.transformers_backend:
            return self.architectures | (self.backend_architectures & self.transformers_architectures)
        return self.architectures


def image_card() -> Optional[str]:
    """The card this image was built for, or None outside an image."""
    try:
        with open(IMAGE_CARD_FILE, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


VARIANT_SEP = "@"


def variants_of(card: str) -> List[str]:
    """The engine variants of a card that have a profile here: `card` itself first, then
    `card@<variant>` by name; a name that already names a variant is only itself."""
    if VARIANT_SEP in card:
        return [card]
    try:
        names = os.listdir(PROFILE_DIR)
    except OSError:
        names = []
    variants = sorted(n[:-5] for n in names if n.startswith(card + VARIANT_SEP) and n.endswith(".json"))
    return [card] + variants


def load_profile(card: str) -> Profile:
    """The profile of `card`; raises ValueError naming the card when there is none or it is bad."""
    if not card or "/" in card or card.startswith("."):
        raise ValueError(f"invalid card name {card!r}")
    path = os.path.join(PROFILE_DIR, f"{card}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            return Profile.from_json(json.load(fh))
    except FileNotFoundError:
        known = sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".json"))
        raise ValueError(f"no engine profile for card {card!r} (known: {', '.join(known)})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"engine profile {path} is unusable: {exc}") from None
