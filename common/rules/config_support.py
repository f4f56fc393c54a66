"""CONFIG: config.json names a model type the engine's transformers cannot read.

vLLM loads config.json with its own transformers before anything else; a `model_type` that
release does not know (Qwen3.5, Gemma 4 or GLM-5 on transformers 4.55/4.57) fails the start with
"does not recognize this architecture", and an unknown `model_type` of a nested `text_config`
fails the same way (a KeyError in 4.57). No metadata repair teaches an old transformers a new
model: the finding says the model needs a newer engine. Known types are the engine's own
(`CONFIG_MAPPING` of its transformers, in the profile), plus the few top-level model types the
engine reads with config classes of its own before transformers is asked (the profile's
`own_config_classes`: vLLM 0.11 reads `RefinedWeb` so), plus the types R12 registers a class of the
image's for; `doctor` also loads the config with the
engine's AutoConfig, which catches what a table cannot.
"""

from __future__ import annotations

from ..model.config_types import has_own_config_code, model_types
from .support.base import Context, Outcome, Rule


class ConfigSupport(Rule):
    code = "CONFIG"

    def check(self, ctx: Context) -> Outcome:
        known = ctx.profile.config_model_types
        if known is not None:
            known = known | ctx.registered_config_types  # R12's classes, registered before vLLM reads the config
        config = ctx.model.json_object("config.json")
        if known is None or not config or has_own_config_code(config):
            return Outcome()
        unknown = []
        own = ctx.profile.own_config_classes
        for where, model_type in model_types(config):
            if model_type in known:
                continue
            # vLLM's own config classes are read for the top-level type only.
            if where == "model_type":
                if own is None:
                    return Outcome(
                        findings=[
                            self.finding(
                                "unverified",
                                f"transformers {ctx.profile.transformers_version} (the engine's) does not know model_type "
                                f"{model_type!r}, and this profile cannot say whether vLLM {ctx.profile.vllm_version} "
                                "reads it with a config class of its own",
                            )
                        ]
                    )
                if model_type in own:
                    continue
            unknown.append(f"{where} {model_type!r}")
        if not unknown:
            return Outcome()
        return Outcome(
            findings=[
                self.finding(
                    "error",
                    f"transformers {ctx.profile.transformers_version} (the engine's) does not know "
                    f"{' and '.join(unknown)}: this model needs a newer engine",
                )
            ]
        )


RULE = ConfigSupport()
