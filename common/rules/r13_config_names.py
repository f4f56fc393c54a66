"""R13: the engine's model code reads a config name that the model's config.json does not carry.

Some of vLLM's model code reads names that only a family's first checkpoints wrote, and that no
transformers since writes or maps: vLLM 0.11's Gemma 2 reads `hidden_act` (and serves tanh-GELU
only) where Google's config.json files carry it beside `hidden_activation`, but a Gemma 2 saved by
transformers 5, or by the engine's own 4.57, has `hidden_activation` alone, and the engine's model
build stops with `'Gemma2Config' object has no attribute 'hidden_act'`. Which names an engine
generation reads so, and what the config carries instead, are found from the engine itself: its
model classes built from the configs both savers write (common/engine/config_names.json, written
by `python -m compat_build.config_names`). What the config carries is one of its keys under
another name (Gemma 2's `hidden_activation`, ModernBERT's `norm_eps`, LFM2's `hidden_size` and
`intermediate_size`), a constant the author's code computes with (DeepSeek-V2 puts experts on
every layer after the dense ones, scored by softmax: `moe_layer_freq` 1, `scoring_func`
"softmax"), or a quotient of two (GLM-4.5's head size). The repair states each missing name with
that value the way R5 states what the engine would lose: through `--hf-overrides` where the engine
has it; a nested `text_config` (PaliGemma 2's Gemma 2), which `--hf-overrides` would replace
wholesale, given whole through `--hf-config-path` or a model view, verified with the engine's own
transformers. A name the config already carries is left as it is, and the platform's own
`--hf-overrides` wins over the repair's where both give one (merged). An engine generation the
table does not list gets nothing.
"""

from __future__ import annotations

import json
import os

from ..model.headsize import NESTED_TEXT_CONFIGS as NESTED
from ..model.json_numbers import number, positive_int
from ..plan import Repair
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

TABLE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine", "config_names.json")
_TABLE: Dict[str, Any] = {}


def table() -> Dict[str, Any]:
    """config_names.json: {"engines": {vLLM version: {model_type: {"class": config class, "names":
    {name the engine reads: what the config carries}}}}}; empty when missing or unreadable."""
    if not _TABLE:
        try:
            with open(TABLE_FILE, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            data = {}
        _TABLE.update(data if isinstance(data, dict) and isinstance(data.get("engines"), dict) else {"engines": {}})
    return _TABLE


def engine_names(vllm_version: str) -> Dict[str, Dict[str, Any]]:
    """model_type -> its entry, for one engine generation (empty: none known)."""
    found = table()["engines"].get(vllm_version)
    return found if isinstance(found, dict) else {}


def _scalar(value: Any) -> bool:
    """A value that may be stated as it is: text, a flag, or a finite number (a model's string is
    never a flag: it reaches vLLM inside one JSON argument)."""
    return isinstance(value, (str, bool)) or number(value) is not None


def stated_value(config: Dict[str, Any], carrier: Dict[str, Any]) -> Optional[Any]:
    """The value a config states for a name it does not carry, by what carries it: {"key": K} its
    value of K, {"value": V} the constant V, {"quotient": [A, B]} A // B where B divides A. None:
    the config does not state it either (or not as a plain value)."""
    if "key" in carrier:
        value = config.get(carrier["key"])
        return value if _scalar(value) else None
    if "value" in carrier:
        return carrier["value"] if _scalar(carrier["value"]) else None
    pair = carrier.get("quotient")
    if isinstance(pair, list) and len(pair) == 2:
        top, bottom = positive_int(config.get(pair[0])), positive_int(config.get(pair[1]))
        if top is not None and bottom is not None and top % bottom == 0:
            return top // bottom
    return None


def carrier_text(carrier: Dict[str, Any]) -> str:
    """What carries a name, in words for the repair's detail."""
    if "key" in carrier:
        return f"its {carrier['key']}"
    if "value" in carrier:
        return "the author's constant"
    return " / ".join(carrier.get("quotient") or ()) or "?"


def missing(config: Dict[str, Any], entry: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str]]:
    """(name -> value to state, the names the config states no value for) of one (sub)config."""
    names = entry.get("names") if isinstance(entry, dict) else None
    stated: Dict[str, Any] = {}
    unstated: List[str] = []
    for name, carrier in sorted((names or {}).items()):
        if name in config or not isinstance(carrier, dict):
            continue
        value = stated_value(config, carrier)
        if value is None:
            unstated.append(name)
        else:
            stated[name] = value
    return stated, unstated


class ConfigNames(Rule):
    code = "R13"

    @property
    def log_signatures(self) -> Tuple[str, ...]:  # type: ignore[override]
        """The engine's refusal of each config class without a name it reads, every generation's."""
        out = set()
        for types in table()["engines"].values():
            for entry in types.values() if isinstance(types, dict) else ():
                cls, names = entry.get("class"), sorted(entry.get("names") or ())
                if isinstance(cls, str) and cls.isidentifier() and names:
                    out.add(f"'{cls}' object has no attribute '(?:{'|'.join(names)})'")
        return tuple(sorted(out))

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        types = engine_names(ctx.profile.vllm_version) if config else {}
        if not types:
            return outcome
        edits: Dict[str, Any] = {}
        said: List[str] = []
        for key, sub in [("", config)] + [(k, config.get(k)) for k in NESTED]:
            model_type = sub.get("model_type") if isinstance(sub, dict) else None
            if not isinstance(model_type, str) or model_type not in types:
                continue
            stated, unstated = missing(sub, types[model_type])
            where = f"{key}." if key else ""
            for name in unstated:
                outcome.findings.append(
                    self.finding(
                        "warning",
                        f"vLLM {ctx.profile.vllm_version}'s {model_type} model code reads {where}{name}, which config.json "
                        "neither carries nor states under another name: not stated",
                    )
                )
            if not stated:
                continue
            carriers = types[model_type]["names"]
            said += [f"{where}{n}={json.dumps(v)} ({carrier_text(carriers[n])})" for n, v in sorted(stated.items())]
            # A nested config is given whole: --hf-overrides would replace it wholesale.
            edits.update({key: dict(sub, **stated)} if key else stated)
        if edits:
            repair = Repair(
                self.code,
                self.title,
                f"vLLM {ctx.profile.vllm_version}'s model code reads what config.json does not carry: stating " + ", ".join(said),
            )
            repair.config_edits = edits
            outcome.repairs.append(repair)
        return outcome


RULE = ConfigNames()
