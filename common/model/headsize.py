"""The attention head size the engine will use, from every form configs state it in."""

from __future__ import annotations

from .json_numbers import integer, positive_int

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Optional, Tuple

# Sub-configs that hold the language model of multimodal and wrapper architectures.
NESTED_TEXT_CONFIGS = ("text_config", "lm_config", "llm_config", "language_config")
# The forms a config states its head size in, in the engine's precedence (after MLA's sum): an
# explicit size (null means "not stated"), or model width over head count. Falcon-40B's real
# config says `hidden_size/n_head` and has no num_attention_heads.
HEAD_SIZE_FORMS = (
    ("head_dim",),
    ("hidden_size", "num_attention_heads"),
    ("n_embd", "n_head"),
    ("hidden_size", "n_head"),
    ("d_kv",),
    ("d_model", "num_heads"),
)
# No attention kernel of any card goes near this; a larger value is a corrupt config.
MAX_PLAUSIBLE_HEAD_SIZE = 4096


class HeadSize:
    __slots__ = ("value", "source", "problem")

    def __init__(self, value: Optional[int], source: str, problem: Optional[str] = None) -> None:
        self.value, self.source, self.problem = value, source, problem

    def __repr__(self) -> str:
        return f"HeadSize({self.value!r}, {self.source!r}, {self.problem!r})"


def attention_config(config: Dict[str, Any]) -> Tuple[Optional[str], Dict[str, Any]]:
    """The config that describes attention: (None, the top level), or the nested language
    model's (its key, it) when the top level states no attention of its own."""
    if not _states_attention(config):
        for key in NESTED_TEXT_CONFIGS:
            nested = config.get(key)
            if isinstance(nested, dict):
                return key, nested
    return None, config


def _states_attention(config: Dict[str, Any]) -> bool:
    keys = ("head_dim", "num_attention_heads", "n_head", "d_kv", "qk_nope_head_dim")
    return any(k in config for k in keys)


def _checked(value: Any, source: str) -> HeadSize:
    if positive_int(value) is None:
        return HeadSize(None, source, f"{source} is {value!r}, not a positive integer")
    if value > MAX_PLAUSIBLE_HEAD_SIZE:
        return HeadSize(None, source, f"{source} is {value}, implausibly large")
    return HeadSize(value, source)


def _ratio(config: Dict[str, Any], hidden_key: str, heads_key: str) -> HeadSize:
    source = f"{hidden_key}/{heads_key}"
    hidden, heads = config.get(hidden_key), config.get(heads_key)
    if positive_int(hidden) is None or positive_int(heads) is None:
        return HeadSize(None, source, f"{source} is {hidden!r}/{heads!r}, not two positive integers")
    if hidden % heads:
        return HeadSize(None, source, f"{hidden_key} {hidden} is not divisible by {heads_key} {heads}")
    return _checked(hidden // heads, source)


def detect_head_size(config: Dict[str, Any]) -> HeadSize:
    """Head size per the precedence of the engine: MLA sum, explicit head_dim, then ratios."""
    cfg = attention_config(config)[1]
    if "qk_nope_head_dim" in cfg and "qk_rope_head_dim" in cfg:
        nope, rope = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"]
        source = "qk_nope_head_dim+qk_rope_head_dim"
        # A zero nope part is MLA without one (an int: 0.0 or False plus a huge rope would be
        # float arithmetic, and overflow).
        if not (integer(nope, 0) is not None and positive_int(rope) is not None):
            return HeadSize(None, source, f"{source} is {nope!r}+{rope!r}, not integers")
        return _checked(nope + rope, source)
    for form in HEAD_SIZE_FORMS:
        if len(form) == 1 and cfg.get(form[0]) is not None:
            return _checked(cfg[form[0]], form[0])
        if len(form) == 2 and form[0] in cfg and form[1] in cfg:
            return _ratio(cfg, *form)
    return HeadSize(None, "none", "config states no attention head size")
