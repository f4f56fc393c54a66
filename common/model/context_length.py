"""The context length an engine derives for a model from its config.json (its position keys,
capped by a sliding window where the engine turns windows off, stretched by the rope scaling),
by the rules the card's engine profile states (compat_build/snapshot_engine.py reads them from the
engine's source). CTX holds the platform's --max-model-len to it; doctor's memory check sizes one
request's KV cache by it."""

from __future__ import annotations

from .headsize import attention_config
from .json_numbers import positive_number

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Mapping, Optional, Tuple


def rope_scaling(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The rope scaling the engine reads: rope_scaling, or transformers 5's rope_parameters
    (the repairs of R5 hand it over in the engine's own form)."""
    for key in ("rope_scaling", "rope_parameters"):
        value = config.get(key)
        if isinstance(value, dict) and not any(isinstance(v, dict) for v in value.values()):
            kind = value.get("rope_type") or value.get("type")
            if key == "rope_scaling" or (kind and kind != "default"):
                return value
    return None


def derived_length(config: Dict[str, Any], rules: Mapping[str, Any], disable_window: bool) -> Tuple[Optional[float], str, bool]:
    """(the length the engine derives, the key it comes from, whether a window capped it);
    None when the config states no length (the engine then takes the given one)."""
    _, cfg = attention_config(config)
    derived, key = None, ""
    for name in rules.get("keys", ()):
        value = positive_number(cfg.get(name))
        if value is not None and (derived is None or value < derived):
            derived, key = value, name
    window = positive_number(cfg.get("sliding_window")) if cfg.get("use_sliding_window") is not False else None
    model_type = str(cfg.get("model_type") or config.get("model_type") or "")
    capped = window is not None and (disable_window or model_type in rules.get("window_capped_model_types", ()))
    if capped and (derived is None or window < derived):
        derived, key = window, "sliding_window"
    if derived is None:
        return None, "", False
    scaling = rope_scaling(cfg)
    if scaling is not None and not any(t in model_type for t in rules.get("unscaled_model_types", ())):
        kind = scaling.get("rope_type") or scaling.get("type")
        if kind not in rules.get("unscaled_rope_types", ()) and kind != "default":
            factor = positive_number(scaling.get("factor")) or 1.0
            if kind == "yarn" and rules.get("yarn_from_original") and positive_number(scaling.get("original_max_position_embeddings")):
                derived = float(scaling["original_max_position_embeddings"])
            derived *= factor
    return derived, key, capped
