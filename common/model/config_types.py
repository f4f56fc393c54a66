"""The model types config.json names: its own and its nested text configs', which the engine's
AutoConfig must each know (CONFIG says when it does not, R12 registers a class of the image's)."""

from __future__ import annotations

from .headsize import NESTED_TEXT_CONFIGS

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Tuple


def model_types(config: dict) -> List[Tuple[str, str]]:
    """(where, model type): config.json's `model_type` first, then each nested text config's
    ("text_config.model_type"), as the finding names them; a type that is not a string is none."""
    found = [("model_type", config.get("model_type"))]
    for key in NESTED_TEXT_CONFIGS:
        nested = config.get(key)
        found.append((f"{key}.model_type", nested.get("model_type") if isinstance(nested, dict) else None))
    return [(where, kind) for where, kind in found if isinstance(kind, str)]


def has_own_config_code(config: dict) -> bool:
    """The model brings its config class (auto_map's AutoConfig): REMOTE_CODE judges it, not the
    engine's table of types."""
    auto_map = config.get("auto_map")
    return isinstance(auto_map, dict) and "AutoConfig" in auto_map
