"""What the start's own flags change in what the engine computes, beside the configuration file:
the configuration the engine reads under --rope-theta, --rope-scaling and
--disable-sliding-window, the context it is served with, and the dtype it computes in.

vLLM folds --rope-theta and --rope-scaling into the top level of the configuration it reads (as
hf_overrides: 0.5.5's get_config updates the config, 0.11 adds them to hf_overrides), so a
user who enables YaRN this way, as Qwen's documentation does, serves a configuration the file
does not show. --disable-sliding-window drops the window from the configuration and caps the
context at it (vLLM's ModelConfig, every generation). --dtype auto serves the configuration's
dtype, a float32 one in float16. A conformance cell runs float32 (the author's greedy ids are
float32's): another dtype is a regime no cell ran. Standard library only.
"""

from __future__ import annotations

import json

from ..model.headsize import NESTED_TEXT_CONFIGS, attention_config
from ..model.json_numbers import positive_int
from .vllm_args import positive, switch_arg

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple

    from .vllm_args import UserArgs

# What `--dtype auto` serves for each configuration dtype, in vLLM 0.5.5 as in 0.11: a float32
# configuration is served in half precision (and so is one that names no dtype: the engine
# takes it for float32).
AUTO_SERVES = {"float32": "float16", "float": "float16", "float64": "float16"}
# --dtype's other names for a dtype.
DTYPE_NAMES = {"half": "float16", "float": "float32", "double": "float64"}
CONFIG_DTYPE_KEYS = ("torch_dtype", "dtype")


def served_dtype(config: Mapping[str, Any], flag: Optional[str]) -> str:
    """The dtype a start computes in: --dtype's value, or for `auto` (vLLM's default) what auto
    picks from the configuration's dtype."""
    if flag and flag != "auto":
        return DTYPE_NAMES.get(flag, flag)
    written = next((config.get(k) for k in CONFIG_DTYPE_KEYS if isinstance(config.get(k), str)), None)
    if written is None:
        nested = next((config[k] for k in NESTED_TEXT_CONFIGS if isinstance(config.get(k), dict)), {})
        written = next((nested.get(k) for k in CONFIG_DTYPE_KEYS if isinstance(nested.get(k), str)), "float32")
    written = DTYPE_NAMES.get(written, written)
    return AUTO_SERVES.get(written, written)


def _with_rope(view: Dict[str, Any], change: Mapping[str, Any]) -> Dict[str, Any]:
    """`change` (rope_theta or a rope_scaling) at the top level, where vLLM puts it: into
    rope_scaling or rope_theta, and into a transformers-5 rope_parameters of one kind too (the
    name a transformers-5 reader reads). A nested text configuration is left as it is, as vLLM
    leaves it."""
    out = dict(view)
    if "rope_theta" in change:
        out["rope_theta"] = change["rope_theta"]
    else:
        out["rope_scaling"] = dict(change)
    params = out.get("rope_parameters")
    if isinstance(params, dict) and not any(isinstance(v, dict) for v in params.values()):
        out["rope_parameters"] = dict(params, **change)
    return out


def _window(config: Mapping[str, Any]) -> Tuple[Optional[str], Optional[int]]:
    """(the key of the configuration that holds the text model's window, None for the top
    level; the window) of a configuration."""
    for key in (None, *NESTED_TEXT_CONFIGS):
        part = config if key is None else config.get(key)
        if isinstance(part, dict) and positive_int(part.get("sliding_window")):
            return key, part["sliding_window"]
    return None, None


def with_start_flags(
    config: Mapping[str, Any], user: UserArgs, max_model_len: Optional[str]
) -> Tuple[Dict[str, Any], Optional[str], List[str]]:
    """(the configuration the engine reads under the start's flags, the context it is served
    with, what of the flags cannot be placed)."""
    from ..model.config_traits import context_length  # doctor's only: R5 imports this module at every start

    view, problems = dict(config), []
    if user.has("--rope-theta"):
        theta = positive(user.value("--rope-theta"))
        if theta is None:
            problems.append("--rope-theta that doctor cannot read as a positive number")
        else:
            view = _with_rope(view, {"rope_theta": theta})
    if user.has("--rope-scaling"):
        try:
            scaling = json.loads(user.value("--rope-scaling") or "")
        except ValueError:
            scaling = None
        if isinstance(scaling, dict) and scaling:
            view = _with_rope(view, scaling)
        else:
            problems.append("--rope-scaling that doctor cannot read as one JSON object")
    if switch_arg(user, "--disable-sliding-window"):
        key, window = _window(view)
        if window is not None:
            if key is None:
                view["sliding_window"] = None
            else:
                view[key] = dict(view[key], sliding_window=None)
            context = context_length(attention_config(dict(config))[1], max_model_len)
            max_model_len = str(min(context, window) if context else window)
    return view, max_model_len, problems
