"""R12: the engine's transformers lacks the config class of the model's type, and the image has one.

transformers 4.55 (vLLM 0.5.5's) has no class for Gemma 4, Ministral 3 or Qwen3.5 configs: vLLM
reads config.json with AutoConfig before anything else, and the start fails with "does not
recognize this architecture" (CONFIG), for the top-level `model_type` or a nested `text_config`'s.
The image carries config classes for those types, written for transformers 4 from transformers
5's own (common/vllm_plugin/compat_configs). Where the profile's `config_model_types` lacks the
type and the image has its class, the repair puts the plugin directory first on PYTHONPATH and
names the types in COMPAT_CONFIGS: the directory's sitecustomize registers them with the engine's
AutoConfig at interpreter start, before vLLM reads the config (a class the running transformers
has is never replaced). CONFIG then counts them as known; doctor's engine AutoConfig check
registers them too. Reading the config is not serving the model: the engine must still have the
architecture (R4, R10).
"""

from __future__ import annotations

from ..model.headsize import NESTED_TEXT_CONFIGS
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List


def config_types(config: dict) -> List[str]:
    """config.json's model type and its nested text configs' types, in that order."""
    found = [config.get("model_type")]
    found += [nested.get("model_type") for nested in (config.get(k) for k in NESTED_TEXT_CONFIGS) if isinstance(nested, dict)]
    return [t for t in found if isinstance(t, str)]


class ConfigClasses(Rule):
    code = "R12"
    title = "config class the engine's transformers lacks, registered from the image"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "the image registers its config class for the model type with the engine's AutoConfig (COMPAT_CONFIGS); elsewhere a newer engine"

    # The engine's refusal of an unknown type stays CONFIG's in triage: reading the config is not
    # starting the model, and none of these architectures is served by the engines here without a
    # backport (R4), so "a newer engine" is the fix a failure log should name.
    log_signatures = ()

    def check(self, ctx: Context) -> Outcome:
        profile = ctx.profile
        known = profile.config_model_types
        config = ctx.model.json_object("config.json")
        if known is None or not config:
            return Outcome()
        auto_map = config.get("auto_map")
        if isinstance(auto_map, dict) and "AutoConfig" in auto_map:
            return Outcome()  # the model's own config code: REMOTE_CODE judges it
        own = profile.own_config_classes or ()
        unknown = [t for t in config_types(config) if t not in known and t not in own]
        if not unknown:
            return Outcome()  # every model the engine reads returns here, having imported nothing
        from ..vllm_plugin.compat_configs import CLASSES, ENV
        from .support.plugin import plugin_repair

        types = [t for t in unknown if t in CLASSES]
        if not types:
            return Outcome()  # no class here: CONFIG says the model needs a newer engine
        types = sorted(set(types))
        ctx.registered_config_types.update(types)
        detail = (
            f"transformers {profile.transformers_version} (the engine's) has no config class for {', '.join(types)}; "
            "the image registers its own with AutoConfig before vLLM reads config.json"
        )
        return Outcome(repairs=[plugin_repair(self.code, self.title, detail, ENV, ",".join(types))])


RULE = ConfigClasses()
