"""R5: config.json is in a newer format than the engine's transformers reads.

transformers 5 writes `rope_parameters` ({"rope_theta", "rope_type", scaling keys}) and drops the
top-level `rope_theta` / `rope_scaling`; transformers 4.x does not look inside `rope_parameters`
and silently uses the class default (rope_theta 10000 instead of 1e6): the model loads and
generates wrong text, with no error anywhere. It also writes `dtype` where transformers before
4.56 reads only `torch_dtype` (the BI-100 stack, 4.55): vLLM 0.5.5 then takes the model for
float32 and, with `--dtype auto`, serves a bfloat16 model in float16 (overflow-prone).
The repair restores exactly the values the engine would lose: through `--hf-overrides` where the
card's vLLM has it (0.6.x and later), else through `--rope-theta` / `--rope-scaling` / `--dtype`.
vLLM applies `--hf-overrides` with setattr on the top-level config, so values lost inside a nested
`text_config` cannot be restored that way: they are reported as a finding.
"""

from __future__ import annotations

import json

from ..plan import Repair
from .base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

NESTED = ("text_config", "lm_config", "llm_config", "language_config")
# transformers reads `dtype` from this version on (before: `torch_dtype` only).
DTYPE_KEY_SINCE = (4, 56)
# The dtype names a config may carry; anything else is never passed on (a model's string must
# not become a flag: `--dtype --trust-remote-code` would be two arguments to vLLM).
CONFIG_DTYPES = ("float16", "bfloat16", "float32", "float64", "half", "float")
# rope_parameters keys that are not part of a 4.x `rope_scaling` dict.
NOT_SCALING = ("rope_theta", "partial_rotary_factor")


def _version(text: str) -> Tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def lost_values(config: Dict[str, Any], transformers_version: str) -> Dict[str, Any]:
    """The top-level config keys the engine's transformers would lose, with their values."""
    lost: Dict[str, Any] = {}
    rope = config.get("rope_parameters")
    if isinstance(rope, dict):
        theta = rope.get("rope_theta")
        if isinstance(theta, (int, float)) and not isinstance(theta, bool) and theta > 0 and "rope_theta" not in config:
            lost["rope_theta"] = theta
        factor = rope.get("partial_rotary_factor")
        if isinstance(factor, (int, float)) and "partial_rotary_factor" not in config:
            lost["partial_rotary_factor"] = factor
        kind = rope.get("rope_type", rope.get("type"))
        if isinstance(kind, str) and kind != "default" and config.get("rope_scaling") is None:
            lost["rope_scaling"] = {k: v for k, v in rope.items() if k not in NOT_SCALING}
    dtype = config.get("dtype")
    if dtype in CONFIG_DTYPES and "torch_dtype" not in config and _version(transformers_version) < DTYPE_KEY_SINCE:
        lost["torch_dtype"] = dtype
    return lost


# EngineArgs field and flag for each lost key, for engines without --hf-overrides.
FLAG_FOR = {"rope_theta": ("rope_theta", "--rope-theta"), "rope_scaling": ("rope_scaling", "--rope-scaling"),
            "torch_dtype": ("dtype", "--dtype")}


class ConfigFormat(Rule):
    code = "R5"
    title = "config.json in a newer format than the engine reads"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "restore the silently lost rope_theta / rope_scaling / dtype through --hf-overrides (or the engine's own flags)"
    # Nothing fails: the model loads and generates wrong text, so no log line points here
    # (doctor finds it from the model directory instead).
    log_signatures = ()

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        if not config:
            return outcome
        version = ctx.profile.transformers_version
        lost = lost_values(config, version)
        for key in NESTED:
            nested = config.get(key)
            if isinstance(nested, dict):
                inner = lost_values(nested, version)
                inner.pop("torch_dtype", None)  # the top-level dtype decides the engine's dtype
                if inner:
                    outcome.findings.append(self.finding(
                        "warning", f"{key} holds {', '.join(sorted(inner))} only inside rope_parameters; the engine's "
                                   f"transformers {version} will use its defaults and vLLM's --hf-overrides cannot "
                                   "set nested values: this model may generate wrong text on this card"))
        if not lost:
            return outcome
        if ctx.profile.accepts("hf_overrides") is not False:
            outcome.repairs.append(Repair(self.code, self.title, self._detail(lost, version), hf_overrides=lost))
            return outcome
        args, left = self._flags(ctx, lost)
        if args:
            outcome.repairs.append(Repair(self.code, self.title, self._detail(lost, version), args=args))
        if left:
            outcome.findings.append(self.finding(
                "warning", f"{', '.join(left)} would be lost and this engine has no flag to restore it"))
        return outcome

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
