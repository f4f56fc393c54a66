"""R5: config.json is in a newer format than the engine's transformers reads.

transformers 5 writes `rope_parameters` ({"rope_theta", "rope_type", scaling keys}) and drops the
top-level `rope_theta` / `rope_scaling`; transformers 4.x does not look inside `rope_parameters`
and silently uses the class default (rope_theta 10000 instead of 1e6): the model loads and
generates wrong text, with no error anywhere. It also writes `dtype` where transformers before
4.56 reads only `torch_dtype` (the BI-100 stack, 4.55): vLLM 0.5.5 then takes the model for
float32 and, with `--dtype auto`, serves a bfloat16 model in float16 (overflow-prone); a dtype is
restored only where it changes what `auto` picks. The repair restores exactly the values the
engine would lose: through `--hf-overrides` where the card's vLLM has it (0.6.x and later), else
through `--rope-theta` / `--rope-scaling` / `--dtype`, and what no flag carries through a model
view with a rewritten config.json. A vision-language model saved by transformers 5 (LLaVA...)
keeps its language model's RoPE in `text_config.rope_parameters`, which transformers 4.x reads
the same silent way; `--hf-overrides` replaces a nested dict wholesale, so the repaired
`text_config` is given whole and carried by `--hf-config-path` (a rewritten config.json, the
model path kept) or a model view, verified by the engine's AutoConfig reading the nested value.
transformers 5 also renamed some keys (Qwen3-MoE writes `num_local_experts`, which its class
answers to as `num_experts` through attribute_map); an engine's config class without that mapping
(transformers 4.55 and 4.57: from the profile's `config_attribute_maps`) uses its default, 128
experts, and the checkpoint no longer fits the model: the old key is restored the same way.
"""

from __future__ import annotations

import json

from ..engine.start_flags import AUTO_SERVES
from ..model.headsize import NESTED_TEXT_CONFIGS as NESTED
from ..model.json_numbers import INFINITY, number, positive_int
from ..plan import Repair
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

# The dtype names a config may carry; anything else is never passed on (a model's string must
# not become a flag: `--dtype --trust-remote-code` would be two arguments to vLLM).
CONFIG_DTYPES = ("float16", "bfloat16", "float32", "float64", "half", "float")
# A lost dtype is restored only where it changes what `--dtype auto` serves (AUTO_SERVES: a
# `dtype: float32` model lost to 4.55 is served in float16 either way; `--dtype float32` would
# double its weight memory), i.e. where the engine would pick differently for float32.
# Keys transformers 5 renamed, per model_type: (the key it writes, the key transformers 4.x reads).
# Its class answers to the old name through attribute_map; whether the engine's does is a profile fact.
RENAMED = {
    "qwen3_moe": (("num_local_experts", "num_experts"),),
}
# rope_parameters keys that are not part of a 4.x `rope_scaling` dict.
NOT_SCALING = ("rope_theta", "partial_rotary_factor")


def _number(value: Any, low: float = 0.0, high: float = INFINITY, low_open: bool = True) -> bool:
    """A JSON number (not a boolean) that is finite and in range: NaN, Infinity and 1e400 are not."""
    return number(value, low, high, low_open) is not None


def _scaling_ok(scaling: Dict[str, Any]) -> Optional[str]:
    """Why a rope_scaling dict must not be passed on, or None. Its values are text, flags
    (`truncate`), null, finite non-negative numbers or lists of them (longrope's factors)."""
    for key, value in scaling.items():
        if key == "factor" and not _number(value):
            return f"factor is {_shown(value)}"
        if isinstance(value, (str, bool)) or value is None or _number(value, low_open=False):
            continue
        if isinstance(value, list) and all(_number(v, low_open=False) for v in value):
            continue
        return f"{key} is {_shown(value)}"
    return None


def _not_finite(value: Any, path: str, depth: int = 0) -> Optional[Tuple[str, Any]]:
    """The first value in `value` that strict JSON cannot write (NaN or an infinity, which
    Python's json reads from a config.json), with its path; None when there is none. A nested
    config is handed on whole, so one such value anywhere in it would make the plan's JSON and
    the rewritten config.json not JSON."""
    if isinstance(value, float):
        return (path, value) if value - value != 0.0 else None
    if depth > 64:  # deeper than any config: not walked, and not handed on either
        return (path, "...")
    if isinstance(value, dict):
        items = [(f"{path}.{k}", v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(f"{path}[{i}]", v) for i, v in enumerate(value)]
    else:
        return None
    for inner_path, inner in items:
        found = _not_finite(inner, inner_path, depth + 1)
        if found:
            return found
    return None


def _shown(value: Any) -> str:
    try:
        text = json.dumps(value)
    except (ValueError, TypeError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def lost_values(
    config: Dict[str, Any], reads_rope_parameters: bool, reads_dtype_key: bool, refused: Optional[List[str]] = None
) -> Dict[str, Any]:
    """The top-level config keys an engine's transformers that reads (or not) `rope_parameters`
    and the `dtype` key would lose, with their values. Only sane values are restored (a finite
    positive rope_theta, ...); each other one is described in `refused` when given."""
    lost: Dict[str, Any] = {}
    refused = refused if refused is not None else []
    rope = config.get("rope_parameters")
    if isinstance(rope, dict) and not reads_rope_parameters:
        theta = rope.get("rope_theta")
        if "rope_theta" in rope and "rope_theta" not in config:
            if _number(theta):
                lost["rope_theta"] = theta
            else:
                refused.append(f"rope_parameters.rope_theta is {_shown(theta)}, not a finite positive number")
        factor = rope.get("partial_rotary_factor")
        if "partial_rotary_factor" in rope and "partial_rotary_factor" not in config:
            if _number(factor, high=1.0):
                lost["partial_rotary_factor"] = factor
            else:
                refused.append(f"rope_parameters.partial_rotary_factor is {_shown(factor)}, not a number in (0, 1]")
        kind = rope.get("rope_type", rope.get("type"))
        if isinstance(kind, str) and kind != "default" and config.get("rope_scaling") is None:
            scaling = {k: v for k, v in rope.items() if k not in NOT_SCALING}
            why = _scaling_ok(scaling)
            if why is None:
                lost["rope_scaling"] = scaling
            else:
                refused.append(f"rope_parameters ({kind} scaling): {why}, not a sane value")
    dtype = config.get("dtype")
    if dtype in CONFIG_DTYPES and "torch_dtype" not in config and not reads_dtype_key:
        # The engine's transformers reads no dtype: the engine takes the model for float32.
        if AUTO_SERVES.get(dtype, dtype) != AUTO_SERVES["float32"]:
            lost["torch_dtype"] = dtype
    return lost


# EngineArgs field and flag for each lost key, for engines without --hf-overrides.
FLAG_FOR = {
    "rope_theta": ("rope_theta", "--rope-theta"),
    "rope_scaling": ("rope_scaling", "--rope-scaling"),
    "torch_dtype": ("dtype", "--dtype"),
}


class ConfigFormat(Rule):
    code = "R5"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        if not config:
            return outcome
        version = ctx.profile.transformers_version
        rope_read, dtype_read = ctx.profile.reads_rope_parameters, ctx.profile.reads_dtype_key
        if rope_read is None or dtype_read is None:
            if "rope_parameters" in config or "dtype" in config:
                outcome.findings.append(
                    self.finding(
                        "unverified",
                        "this profile does not say whether the engine's transformers reads rope_parameters "
                        "and dtype (transformers 5 form); not checked",
                    )
                )
            return outcome
        refused: List[str] = []
        lost = lost_values(config, rope_read, dtype_read, refused)
        lost.update(self._renamed(ctx, config, refused, outcome))
        for why in refused:
            outcome.findings.append(
                self.finding("warning", f"{why}: not restored; the engine's transformers {version} will use its default")
            )
        nested_edits: Dict[str, Any] = {}
        for key in NESTED:
            nested = config.get(key)
            if isinstance(nested, dict):
                inner_refused: List[str] = []
                inner = lost_values(nested, rope_read, dtype_read, inner_refused)
                inner.pop("torch_dtype", None)  # the top-level dtype decides the engine's dtype
                for why in inner_refused:
                    outcome.findings.append(
                        self.finding("warning", f"{key}.{why}: not restored; the engine's transformers {version} will use its default")
                    )
                bad = _not_finite(nested, key) if inner else None
                if bad:
                    outcome.findings.append(
                        self.finding(
                            "warning",
                            f"{key} is handed on whole and {bad[0]} is {bad[1]}, which JSON cannot carry: "
                            f"{key}.{', '.join(sorted(inner))} not restored; the engine's transformers {version} will use its default",
                        )
                    )
                elif inner:
                    # Given whole: vLLM's --hf-overrides would replace the nested dict wholesale.
                    nested_edits[key] = dict(nested, **inner)
                    lost.update({f"{key}.{name}": value for name, value in inner.items()})
        if not lost:
            return outcome
        repair = Repair(self.code, self.title, self._detail(lost, version))
        if nested_edits:
            # No flag carries a nested value: the whole repair goes through a rewritten config.json
            # (--hf-config-path or a model view, common/start/model_view.py).
            top = {key: value for key, value in lost.items() if "." not in key}
            repair.config_edits = dict(top, **nested_edits)
        elif ctx.profile.accepts("hf_overrides"):
            repair.config_edits = dict(lost)
        else:
            # The engine's own flags keep the model path; what no flag carries goes through a
            # rewritten config.json (a model view on vLLM 0.5.5).
            repair.args, left = self._flags(ctx, lost)
            repair.config_edits = {key: lost[key] for key in left}
        outcome.repairs.append(repair)
        return outcome

    def _renamed(self, ctx: Context, config: Dict[str, Any], refused: List[str], outcome: Outcome) -> Dict[str, Any]:
        """The keys transformers 5 renamed that the engine's config class would not read, under
        the name it reads."""
        model_type = config.get("model_type")
        pairs = RENAMED.get(model_type, ()) if isinstance(model_type, str) else ()
        wanted = [(new, old) for new, old in pairs if new in config and old not in config]
        if not wanted:
            return {}
        maps = ctx.profile.config_attribute_maps
        if maps is None:
            names = ", ".join(new for new, _ in wanted)
            outcome.findings.append(
                self.finding("unverified", f"this profile does not say whether the engine's transformers reads {names}")
            )
            return {}
        lost = {}
        for new, old in wanted:
            if maps.get(model_type, {}).get(old) == new:
                continue  # the engine's class reads the new name too
            value = config[new]
            if positive_int(value) is not None:
                lost[old] = value
            else:
                refused.append(f"{new} is {_shown(value)}, not a positive count")
        return lost

    @staticmethod
    def _detail(lost: Dict[str, Any], version: str) -> str:
        values = ", ".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(lost.items()))
        return f"transformers {version} would silently drop {values} (written in transformers 5 form)"

    @staticmethod
    def _flags(ctx: Context, lost: Dict[str, Any]) -> Tuple[List[str], List[str]]:
        args: List[str] = []
        left: List[str] = []
        for key, value in sorted(lost.items()):
            field_flag: Optional[Tuple[str, str]] = FLAG_FOR.get(key)
            if field_flag is None or not ctx.profile.accepts(field_flag[0]):
                left.append(key)
                continue
            args += [field_flag[1], value if isinstance(value, str) else json.dumps(value, sort_keys=True)]
        return args, left


RULE = ConfigFormat()
