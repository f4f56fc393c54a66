"""Ministral 3's rope and query scale as transformers 5 computes them, restated for vLLM 0.5.5
and the V1 engine's 0.11, whose yarn rotaries are the same (ministral3.py, ministral3_v1.py).

transformers 5's YaRN (modeling_rope_utils._compute_yarn_parameters) multiplies cos and sin by an
attention factor: `attention_factor` when the parameters give one, else
get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are non-zero (1.0 for
Ministral 3 and Devstral Small 2, whose two are 1), else get_mscale(factor). vLLM 0.5.5's yarn
rotary (YaRNScalingRotaryEmbedding, 0.11's too) always multiplies by get_mscale(factor) *
attn_factor, and its deepseek_yarn variant, which has the ratio, builds its tables on "cuda" only: the backport
hands the plain yarn an attn_factor that turns the engine's factor into transformers'. The
frequencies are the same formula in both (the correction range rounded outward, transformers'
default `truncate`).

Ministral 3 then scales each query by its position, after the rotary embedding:
1 + llama_4_scaling_beta * log(1 + floor(position / original_max_position_embeddings)), the
original length read from the rope parameters (modeling_ministral3.get_llama_4_attn_scale).

Standard library only: the preflight's tests import it without torch or vLLM (scaled_queries
computes with the methods of the tensors it is given).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Tuple

# transformers' defaults where the parameters leave a key out or give 0 (`get(...) or 32`).
BETA_DEFAULTS = {"beta_fast": 32.0, "beta_slow": 1.0}


def get_mscale(factor: float, scale: float = 1.0) -> float:
    """YaRN's magnitude correction, the same function in transformers 5 and vLLM 0.5.5."""
    return 1.0 if factor <= 1 else 0.1 * scale * math.log(factor) + 1.0


def rope_parameters(config: Any) -> Dict[str, Any]:
    """The rope parameters the engine holds for `config`: `rope_scaling`, as the image's config
    class (R12) and R5's flags state transformers 5's `rope_parameters` for an engine of
    transformers 4, else `rope_parameters`."""
    for key in ("rope_scaling", "rope_parameters"):
        value = getattr(config, key, None)
        if isinstance(value, dict) and value:
            return value
    return {}


def kind(params: Mapping[str, Any]) -> str:
    return params.get("rope_type") or params.get("type") or "default"


def _factor_and_original(params: Mapping[str, Any], max_position_embeddings: int) -> Tuple[float, int]:
    # transformers fills a missing original length with max_position_embeddings, and a missing
    # factor with the ratio of the two.
    original = params.get("original_max_position_embeddings") or max_position_embeddings
    factor = params.get("factor")
    return (float(factor) if factor is not None else max_position_embeddings / original), int(original)


def attention_factor(params: Mapping[str, Any], max_position_embeddings: int) -> float:
    """The factor transformers 5 multiplies YaRN's cos and sin by."""
    if params.get("attention_factor") is not None:
        return float(params["attention_factor"])
    factor, _ = _factor_and_original(params, max_position_embeddings)
    scale, scale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if scale and scale_all_dim:
        return get_mscale(factor, scale) / get_mscale(factor, scale_all_dim)
    return get_mscale(factor)


def engine_rope_scaling(params: Mapping[str, Any], max_position_embeddings: int) -> Optional[Dict[str, Any]]:
    """The `rope_scaling` for vLLM 0.5.5's get_rope whose cos and sin are transformers 5's for
    these rope parameters (None: the plain rope). Only the kinds Ministral 3 and the Mistral 3
    text models use; any other is refused rather than served with another engine's formula."""
    rope = kind(params)
    if rope == "default":
        return None
    if rope != "yarn":
        raise ValueError(f"Ministral 3 backport: rope type {rope!r} is not supported on this engine (default and yarn are)")
    if params.get("truncate") is False:
        # The engine always rounds the correction range outward.
        raise ValueError("Ministral 3 backport: yarn with truncate=false is not supported on this engine")
    factor, original = _factor_and_original(params, max_position_embeddings)
    scaling: Dict[str, Any] = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": original}
    scaling.update({key: float(params.get(key) or default) for key, default in BETA_DEFAULTS.items()})
    scaling["attn_factor"] = attention_factor(params, max_position_embeddings) / get_mscale(factor)
    return scaling


def query_scale(params: Mapping[str, Any], max_position_embeddings: int) -> Optional[Tuple[float, int]]:
    """(beta, original length) of Ministral 3's position-dependent query scale; None without one."""
    beta = params.get("llama_4_scaling_beta")
    if not beta:
        return None
    return float(beta), _factor_and_original(params, max_position_embeddings)[1]


def scaled_queries(positions: Any, q: Any, beta: float, original: int) -> Any:
    """The queries `q` [tokens, ...] times Ministral 3's scale at each token's position, with
    transformers' ops in its order (positions divided in float32), one factor per token."""
    scale = (positions.float() / original).floor().add(1).log().mul(beta).add(1)
    return q * scale.unsqueeze(-1).to(q.dtype)
