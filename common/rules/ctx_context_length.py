"""CTX: the platform's --max-model-len is longer than the engine derives for the model.

vLLM refuses to start when `--max-model-len` exceeds the length it derives from config.json: the
smallest of the position keys it reads, stretched by the rope scaling (YaRN from
original_max_position_embeddings; llama3 and LongRoPE not at all), unless the config's
model_max_length allows it or VLLM_ALLOW_LONG_MAX_MODEL_LEN is set. Some generations turn a
model's sliding windows off and cap the length to the window instead: vLLM 0.5.5 serves Gemma 2
without its every-other-layer window, so a Gemma 2 (window 4096) given --max-model-len 8192 never
starts there ("User-specified max_model_len (8192) is greater than the derived max_model_len
(sliding_window=4096 ...)"). How each engine derives it is a profile fact read from its source
(compat_build/snapshot_engine.py); the finding names the largest --max-model-len that starts.
The platform's arguments are its own (red line 4): nothing is changed, the start goes on and the
engine refuses it as it would have.
"""

from __future__ import annotations

from ..headsize import attention_config
from .base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Mapping, Optional, Tuple

TRUTHY = ("1", "true", "yes")


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


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
        value = _number(cfg.get(name))
        if value is not None and (derived is None or value < derived):
            derived, key = value, name
    window = _number(cfg.get("sliding_window")) if cfg.get("use_sliding_window") is not False else None
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
            factor = _number(scaling.get("factor")) or 1.0
            if kind == "yarn" and rules.get("yarn_from_original") and _number(scaling.get("original_max_position_embeddings")):
                derived = float(scaling["original_max_position_embeddings"])
            derived *= factor
    return derived, key, capped


class ContextLength(Rule):
    code = "CTX"
    kind = "runtime check"
    title = "--max-model-len longer than the engine derives for the model"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "give --max-model-len no longer than the length the finding names (or serve on an engine that keeps the model's windows)"
    # The refusal, not the warning the same text makes under VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (then
    # the engine goes on, and whatever stops it later is another class).
    log_signatures = (r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len .*To allow overriding this maximum",)

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        rules = ctx.profile.max_model_len
        given = ctx.user.value("--max-model-len")
        if rules is None or given is None:
            return outcome
        try:
            wanted = int(given)
        except ValueError:
            return outcome  # the engine's own argument parser says so
        # The config the engine reads: R10's backports of Gemma 2 switch its engine-wide window off,
        # and with it the engine's cap of the context.
        config = dict(ctx.model.json_object("config.json"), **ctx.config_edits)
        derived, key, capped = derived_length(config, rules, ctx.user.has("--disable-sliding-window"))
        if derived is None or wanted <= derived:
            return outcome
        model_max = _number(attention_config(config)[1].get("model_max_length"))
        if model_max is not None and wanted <= model_max:
            return outcome
        if rules.get("allow_long_env") and ctx.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in TRUTHY:
            return outcome
        why = f"{key}={derived:g}" + (f", model_max_length={model_max:g}" if model_max is not None else "")
        if capped:
            why += "; it serves this model without its sliding windows, so the window caps the length"
        largest = int(max(derived, model_max or 0))
        outcome.findings.append(
            self.finding(
                "error",
                f"--max-model-len {wanted} is longer than vLLM {ctx.profile.vllm_version} derives for this model ({why}): "
                f"the engine refuses to start; the largest that starts is --max-model-len {largest}",
            )
        )
        return outcome


RULE = ContextLength()
