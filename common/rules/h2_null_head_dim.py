"""H2: the engine's transformers reads `head_dim` as None, and the engine's vLLM uses it as is.

Some config classes set `head_dim = None` when config.json has none (transformers 4.55's
MixtralConfig, and it then saves `"head_dim": null`), and any config can hold an explicit null.
vLLM 0.5.5's `get_head_size` returns `hf_text_config.head_dim` whenever the attribute exists,
so the engine fails with `unsupported operand type(s) for *: 'int' and 'NoneType'`; vLLM 0.11
falls back to hidden_size / num_attention_heads by itself. Both facts come from the engine's
profile (snapshotted from the engine's own classes). Where the engine needs it, the repair
writes the explicit head size (the one `facts.head_size` reports) into config.json, carried by a
model view on engines without a flag for it, and verified with the engine's transformers.
"""

from __future__ import annotations

from ..model.headsize import attention_config, detect_head_size
from ..plan import Repair
from .support.base import Context, Outcome, Rule


class NullHeadDim(Rule):
    code = "H2"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        if not config:
            return outcome
        key, text = attention_config(config)
        if "head_dim" in text and text["head_dim"] is not None:
            return outcome
        model_type = text.get("model_type") if key else config.get("model_type")
        if "head_dim" not in text and model_type not in ctx.profile.null_head_dim_model_types:
            return outcome  # the engine's transformers fills head_dim (or has no such attribute)
        where = f"{key}.head_dim" if key else "head_dim"
        why = (
            "is null in config.json"
            if "head_dim" in text
            else f"is absent and transformers {ctx.profile.transformers_version}'s {model_type} config sets it to None"
        )
        fallback = ctx.profile.head_dim_none_fallback
        if fallback:
            return outcome  # the engine computes hidden_size / num_attention_heads by itself
        if fallback is None:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"{where} {why}; this profile cannot say whether vLLM {ctx.profile.vllm_version} "
                    "falls back to hidden_size / num_attention_heads",
                )
            )
            return outcome
        size = detect_head_size(config).value
        if size is None:
            outcome.findings.append(
                self.finding(
                    "error",
                    f"{where} {why}, vLLM {ctx.profile.vllm_version} fails on it, and the config states no head size to write instead",
                )
            )
            return outcome
        repair = Repair(
            self.code,
            self.title,
            f"{where} {why}; vLLM {ctx.profile.vllm_version} would fail on it: writing head_dim={size} ({detect_head_size(config).source})",
        )
        repair.config_edits = {key: dict(text, head_dim=size)} if key else {"head_dim": size}
        outcome.repairs.append(repair)
        return outcome


RULE = NullHeadDim()
