"""What the families share: transformers 5's `rope_parameters` read as the 4.x names an engine
of transformers 4 reads (`rope_theta`, `rope_scaling`)."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple


def legacy_rope(params: Optional[Dict[str, Any]], default_theta: float) -> Tuple[float, Optional[Dict[str, Any]]]:
    """(rope_theta, rope_scaling) of one rope_parameters dict: scaling is None for the plain rope
    ("default"), else the parameters without the theta (4.x keeps theta apart from the scaling)."""
    params = dict(params or {})
    theta = float(params.pop("rope_theta", default_theta))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, None
    params.setdefault("rope_type", kind)
    return theta, params


def text_sub_config(value: Any, cls: type) -> Any:
    """A composite's text_config as `cls` (a dict as saved, None: the defaults)."""
    if value is None:
        return cls()
    return cls(**value) if isinstance(value, dict) else value
