"""R9's tables and rename: a vision tower saved by transformers 5 one level flatter than published.

transformers 5 folds CLIP-like vision towers (CLIPVisionModel and the classes its conversion mapping
sends to it: SiglipVisionModel, Siglip2VisionModel, ...) into one module, and loads the published
names through `PrefixChange(prefix_to_remove="vision_model")` (transformers/conversion_mapping.py).
A model it built from a config, or loaded from such a checkpoint, saves without that level:
`vision_tower.embeddings.class_embedding`, where every published LLaVA, LLaVA-NeXT, LLaVA-OneVision,
PaliGemma and Gemma 3 has `vision_tower.vision_model.embeddings.class_embedding` (a model loaded from
the published names keeps them on save). vLLM's CLIPVisionModel and SiglipVisionModel keep the
level (`self.vision_model`), so they look the flat names up and fail. `rename` puts the level back,
for the tower's own children only, so nothing else in the checkpoint can be touched.

The plugin (compat_plugin.py) applies it in the engine's weight iterator when COMPAT_WEIGHT_NAMES
names a scheme; the preflight's R9 imports the tables. Standard library only, no import-time work.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Tuple

ENV = "COMPAT_WEIGHT_NAMES"

# scheme -> (where the tower sits in the checkpoint, the level transformers 5 drops, the tower's own
# children below that level). The prefixes: `vision_tower.` as saved in the original format,
# `model.vision_tower.` as held in memory (save_original_format=False; vLLM maps it to the former).
# The children: CLIPVisionTransformer's (embeddings, pre_layrnorm [sic], encoder, post_layernorm)
# and SiglipVisionTransformer's (embeddings, encoder, post_layernorm, head).
SCHEMES = {
    "vision_model": (
        ("vision_tower.", "model.vision_tower."),
        "vision_model.",
        ("embeddings.", "pre_layrnorm.", "encoder.", "post_layernorm.", "head."),
    ),
}

# model_type -> scheme: the vision-language families whose vision tower is a CLIP or SigLIP tower
# at `vision_tower` both in transformers 5 (which saves it flat) and in vLLM (which loads it through
# its CLIPVisionModel / SiglipVisionModel, level kept: llava.py's init_vision_tower_for_llava,
# paligemma.py, gemma3_mm.py, aya_vision.py). Families checked and left out because transformers 5
# saves their published names: qwen2_vl, qwen2_5_vl (`visual.`), mistral3 (a Pixtral tower),
# idefics2/3 and smolvlm (`model.vision_model.`), mllama (`vision_model.`), internvl (its own
# tower), glm4v (`model.visual.`).
MODEL_TYPES = {
    "llava": "vision_model",
    "llava_next": "vision_model",
    "llava_next_video": "vision_model",
    "llava_onevision": "vision_model",
    "paligemma": "vision_model",
    "gemma3": "vision_model",
    "aya_vision": "vision_model",
}

# vision_config.model_type of the towers vLLM builds with the `vision_model` level; another tower
# (pixtral in a llava config) keeps its own names and is left alone. Absent means the family's
# default tower, which is one of these for every family above.
VISION_TYPES = ("clip_vision_model", "siglip_vision_model")


def flat_part(name: str, scheme: str) -> Tuple[str, str]:
    """(tower prefix, rest) of a tensor of the tower saved without the level, or ("", "")."""
    prefixes, level, children = SCHEMES[scheme]
    for prefix in prefixes:
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return (prefix, rest) if rest.startswith(children) else ("", "")
    return "", ""


def published_part(name: str, scheme: str) -> bool:
    """Whether `name` is a tower tensor that already has the level (the published layout)."""
    prefixes, level, _ = SCHEMES[scheme]
    return any(name.startswith(prefix + level) for prefix in prefixes)


def rename(name: str, scheme: str) -> str:
    """`name` in the published layout: the level put back below the tower; any other name as is."""
    prefix, rest = flat_part(name, scheme)
    return prefix + SCHEMES[scheme][1] + rest if prefix else name
