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

from ..model.context_length import derived_length
from ..model.json_numbers import positive_number
from ..model.headsize import attention_config
from .support.base import Context, Outcome, Rule

TRUTHY = ("1", "true", "yes")


class ContextLength(Rule):
    code = "CTX"

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
        model_max = positive_number(attention_config(config)[1].get("model_max_length"))
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
