"""R9: the vision tower's weights are named the way transformers 5 holds the tower, one level flatter.

transformers 5 folds a CLIP or SigLIP vision tower into one module and drops its `vision_model.`
level when it saves a model it built from a config (or loaded from such a checkpoint):
`vision_tower.embeddings.class_embedding`, where every published LLaVA, LLaVA-NeXT, LLaVA-OneVision,
PaliGemma and Gemma 3 checkpoint has `vision_tower.vision_model.embeddings.class_embedding`.
vLLM's CLIP and SigLIP towers keep the level and look the flat names up: vLLM 0.11.0 dies with
`KeyError: 'embeddings.class_embedding'` (seen); 0.5.5's CLIPVisionModel raises the same KeyError, a
SigLIP tower's first name is `'embeddings.patch_embedding.bias'`, and vLLM 0.32 says `There is no
module or parameter named 'vision_tower.embeddings'` (read from their source). The check reads the
tensor names from model.safetensors.index.json (or the safetensors headers: their length and JSON
only, never weights), and only for the vision-language model types whose tower transformers 5 saves
so. On an engine that runs `vllm.general_plugins` entry points, the repair puts the image's plugin
directory first on PYTHONPATH and names the scheme in COMPAT_WEIGHT_NAMES: the plugin (shared with
R8) puts the level back in the engine's weight iterator, for the tower's own children only, and the
engine's own loader reads the published names. Elsewhere the finding is an error.
"""

from __future__ import annotations

# Only the model-type table at import: the header reader and the plugin's wrapper are imported
# past the model-type test (check), so a model of any other type pays nothing for them.
from ..vllm_plugin.compat_weight_names import ENV, MODEL_TYPES, VISION_TYPES, flat_part, published_part, rename
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Optional


def scheme_for(config: Dict[str, Any]) -> Optional[str]:
    """The rename scheme of this config's family, or None: not a family concerned, or a tower
    (vision_config.model_type) vLLM builds without the level."""
    model_type = config.get("model_type")
    scheme = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
    vision = config.get("vision_config")
    tower = vision.get("model_type") if isinstance(vision, dict) else None
    if scheme is None or (tower is not None and tower not in VISION_TYPES):
        return None
    return scheme


class VisionTowerNames(Rule):
    code = "R9"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        scheme = scheme_for(config)
        if scheme is None:
            return outcome  # not a family transformers 5 saves flat: nothing is read
        from ..model.safetensors_header import tensor_names

        names, where, problems = tensor_names(ctx.model)
        for problem in problems:
            outcome.findings.append(
                self.finding("warning", f"cannot tell whether the vision tower's weights have their published names: {problem.message()}")
            )
        flat = [name for name in names if flat_part(name, scheme)[0]]
        if not flat:
            return outcome
        detail = (
            f"{len(flat)} vision tower tensors in {where} without the vision_model level "
            f"(e.g. {flat[0]}, published as {rename(flat[0], scheme)}), {config.get('model_type')}"
        )
        published = [name for name in names if published_part(name, scheme)]
        if published:
            # Half of each: renaming would load one half over the other. Not a save transformers makes.
            outcome.findings.append(self.finding("error", f"{detail}, and {len(published)} with it (e.g. {published[0]}): mixed layouts"))
            return outcome
        from ..vllm_plugin.compat_plugin import PLUGIN_NAME
        from .support.plugin import blocker, plugin_repair

        blocked = blocker(ctx)
        if blocked is not None:
            severity, why = blocked
            consequence = {"error": ", so it would fail to load them", "unverified": ""}[severity]
            outcome.findings.append(self.finding(severity, f"{detail}: {why}{consequence}"))
            return outcome
        detail = f"{detail}; {PLUGIN_NAME} renames them at load"
        outcome.repairs.append(plugin_repair(self.code, self.title, detail, ENV, scheme))
        return outcome


RULE = VisionTowerNames()
