"""The language model of a vision-language checkpoint, served as text: which tensors are the
text model's and under which name, which are the vision side's (skipped).

transformers (4.55, 4.57 and 5.24 alike) saves Mistral3ForConditionalGeneration (and Gemma 3's) under the
pre-4.52 names: `language_model.model.*`, `language_model.lm_head.*`, `vision_tower.*`,
`multi_modal_projector.*` (its module tree is `model.language_model`, `model.vision_tower`,
`model.multi_modal_projector`, `lm_head`, and its loader maps either form onto it). A checkpoint
written from the module tree itself carries those names: both are read.

`ServedAsText` is how every backported vision-language wrapper serves its text model on vLLM
0.5.5's model API (Gemma 3, Gemma 4, Mistral 3, Qwen3.5), `ServedAsTextV1` on the V1 engine's
(Qwen3.5 on vLLM 0.11). Standard library only: the preflight's tests import this module
without torch or vLLM.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Iterable, Iterator, Optional, Set, Tuple

logger = logging.getLogger("vllm.compat_backports")

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


def tied_by_wrapper(config: Any, unstated: bool) -> bool:
    """Whether a vision-language wrapper's output matrix is its embeddings: transformers decides by
    the wrapper's own `tie_word_embeddings`, not its text part's. `unstated`: what the family's
    wrapper config means when it does not say."""
    return bool(getattr(config, "tie_word_embeddings", unstated))


class _TextOfVLM:
    """What the served-as-text classes of both engine generations share: the config the text
    model is built with, the checkpoint's text tensors under the text model's names, and the log."""

    def text_config(self, config: Any) -> Any:
        """The config the text model is built with."""
        return config.text_config

    def text_loaded(self, seen: Dict[str, Any]) -> None:
        """After the text weights: `seen` holds the embedding tensor and whether an lm_head came."""

    @staticmethod
    def _seen() -> Dict[str, Any]:
        return {"skipped": 0, "lm_head": False, "embedding": None}

    def _text_weights(self, weights: Iterable[Tuple[str, Any]], seen: Dict[str, Any]) -> Iterator[Tuple[str, Any]]:
        for name, tensor in weights:
            renamed = text_name(name)
            if renamed is None:
                seen["skipped"] += 1
                continue
            if renamed == "model.embed_tokens.weight":
                seen["embedding"] = tensor
            seen["lm_head"] = seen["lm_head"] or renamed.startswith("lm_head.")
            yield renamed, tensor

    def _text_done(self, seen: Dict[str, Any]) -> None:
        self.text_loaded(seen)
        logger.info("%s backport: served as text; %d vision and audio tensors not loaded", type(self).__name__, seen["skipped"])


class ServedAsText(_TextOfVLM):
    """A vision-language checkpoint's language model served as text (mixed in before a text
    class of vLLM 0.5.5's model API): built from the wrapper's text config (`text_config`), its
    weights under either published naming, the vision and audio towers never built, their tensors
    skipped and counted in the log (the engine takes no images for it: a text-only start). A
    family whose wrapper decides the tying of the output matrix (tied_by_wrapper) says how in
    `text_config` and `text_loaded`; the others keep their text config's own flag (Gemma 3, Gemma 4)."""

    def __init__(self, config: Any, cache_config: Any = None, quant_config: Any = None, **extra: Any) -> None:
        # extra: the scheduler config of a model with state
        super().__init__(self.text_config(config), cache_config, quant_config, **extra)  # type: ignore[call-arg]

    def load_weights(self, weights: Iterable[Tuple[str, Any]]) -> None:
        seen = self._seen()
        super().load_weights(self._text_weights(weights, seen))  # type: ignore[misc]
        self._text_done(seen)


class ServedAsTextV1(_TextOfVLM):
    """The same on the V1 engine's model API (Qwen3.5 on vLLM 0.11): the engine builds every model
    from one `vllm_config`, whose hf_config is here the wrapper's; the text class gets it with the
    text config in its place (VllmConfig.with_hf_config, as the engine's own vision-language
    models build their language model), and load_weights answers the parameters it loaded."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        text = self.text_config(vllm_config.model_config.hf_config)
        super().__init__(vllm_config=vllm_config.with_hf_config(text), prefix=prefix)  # type: ignore[call-arg]

    def load_weights(self, weights: Iterable[Tuple[str, Any]]) -> Set[str]:
        seen = self._seen()
        loaded = super().load_weights(self._text_weights(weights, seen))  # type: ignore[misc]
        self._text_done(seen)
        return loaded
