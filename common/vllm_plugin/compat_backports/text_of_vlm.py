"""The language model of a vision-language checkpoint, served as text: which tensors are the
text model's and under which name, which are the vision side's (skipped).

transformers (4.55, 4.57 and 5.24 alike) saves Mistral3ForConditionalGeneration (and Gemma 3's) under the
pre-4.52 names: `language_model.model.*`, `language_model.lm_head.*`, `vision_tower.*`,
`multi_modal_projector.*` (its module tree is `model.language_model`, `model.vision_tower`,
`model.multi_modal_projector`, `lm_head`, and its loader maps either form onto it). A checkpoint
written from the module tree itself carries those names: both are read.

Standard library only: the preflight's tests import it without torch or vLLM.
"""

from __future__ import annotations

from typing import Optional

# (checkpoint prefix, the text model's prefix): the first that matches renames the tensor.
TEXT_PREFIXES = (
    ("language_model.model.", "model."),
    ("language_model.lm_head.", "lm_head."),
    ("model.language_model.", "model."),
)
# What a text-only start does not build (Gemma 4's audio tower and its embedders too; Qwen3.5's
# vision tower is `model.visual`).
VISION_PREFIXES = tuple(
    prefix + part
    for prefix in ("", "model.")
    for part in ("vision_tower.", "multi_modal_projector.", "audio_tower.", "embed_vision.", "embed_audio.", "visual.")
)


def text_name(name: str) -> Optional[str]:
    """The text model's name for checkpoint tensor `name`, None for a vision-side tensor; any
    other name (`lm_head.weight`, a text-only save) is the text model's as it stands."""
    if name.startswith(VISION_PREFIXES):
        return None
    for prefix, text in TEXT_PREFIXES:
        if name.startswith(prefix):
            return text + name[len(prefix) :]
    return name
