"""What the families share: transformers 5's `rope_parameters` read as the 4.x names an engine
of transformers 4 reads (`rope_theta`, `partial_rotary_factor`, `rope_scaling`). The one
conversion: the config classes here use it, and so do the conformance matrix's saves of a case
by transformers 4.x (conformance/build.py), so a model saved the old way states what these
classes hand the engine. Standard library only."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional


def legacy_rope(params: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The 4.x keys of one rope_parameters dict, only those it states: rope_theta and
    partial_rotary_factor apart (4.x keeps them on the config), the rest as rope_scaling, which
    the plain rope ("default") has none of. Parameters per layer type (Gemma 3's, a dict of
    dicts) have no 4.x form: {}. LongRoPE's kind goes under `type` (Phi-3's 4.x class takes
    exactly type, short_factor and long_factor), every other under `rope_type`."""
    if not params or any(isinstance(v, dict) for v in params.values()):
        return {}
    rest = dict(params)
    out: Dict[str, Any] = {key: rest.pop(key) for key in ("rope_theta", "partial_rotary_factor") if key in rest}
    kind = rest.pop("rope_type", None) or rest.get("type") or "default"
    if kind != "default":
        out["rope_scaling"] = dict(rest, **{"type" if kind == "longrope" else "rope_type": kind})
    return out


def text_sub_config(value: Any, cls: type) -> Any:
    """A composite's text_config as `cls` (a dict as saved, None: the defaults)."""
    if value is None:
        return cls()
    return cls(**value) if isinstance(value, dict) else value
