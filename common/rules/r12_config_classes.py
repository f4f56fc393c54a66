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

from ..model.config_types import has_own_config_code, model_types
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    pass


class ConfigClasses(Rule):
    code = "R12"

    def check(self, ctx: Context) -> Outcome:
        profile = ctx.profile
        known = profile.config_model_types
        config = ctx.model.json_object("config.json")
        if known is None or not config or has_own_config_code(config):
            return Outcome()
        own = profile.own_config_classes or ()
        unknown = [t for _, t in model_types(config) if t not in known and t not in own]
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
