"""The files a multimodal model's processor is read from, and the engine-side check of them.

vLLM (0.11 as 0.5.5) loads a multimodal model's processor from the model path, never from
`--tokenizer`, and transformers' processor loads its tokenizer from that same path. Two places
need to know what that processor is: R6 (its files in transformers 5 form) and the routing
(common/start/model_view.py), which lays the tokenizer overlay's files into a model view whenever the
model has a processor, whichever rule repaired the tokenizer.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, Optional

    from .modeldir import ModelDir

PROCESSOR_CONFIG = "processor_config.json"
# Nested key of transformers 5's processor_config.json -> the legacy file transformers 4.x reads.
LEGACY_FILES = {
    "image_processor": "preprocessor_config.json",
    "feature_extractor": "preprocessor_config.json",
    "video_processor": "video_preprocessor_config.json",
}
# The key of each legacy file that names its class (and so which component the file is).
TYPE_KEYS = {
    "image_processor": "image_processor_type",
    "feature_extractor": "feature_extractor_type",
    "video_processor": "video_processor_type",
}
# Files whose presence means AutoProcessor reads a processor from the directory, in the order
# transformers looks for `processor_class`; tokenizer_config.json names it last.
PROCESSOR_FILES = (PROCESSOR_CONFIG, "preprocessor_config.json", "video_preprocessor_config.json")
CLASS_SOURCES = PROCESSOR_FILES + ("tokenizer_config.json",)


def has_processor(model: ModelDir) -> bool:
    """Whether the model has files the engine loads a processor from (its model path)."""
    return any(model.state(name).exists for name in PROCESSOR_FILES)


def _component(name: str, content: Dict[str, Any]) -> str:
    """The processor attribute a legacy file fills: preprocessor_config.json is an image
    processor unless it names a feature extractor (audio models)."""
    if name == LEGACY_FILES["video_processor"]:
        return "video_processor"
    return "feature_extractor" if TYPE_KEYS["feature_extractor"] in content else "image_processor"


def processor_check(model: ModelDir) -> Optional[Dict[str, Any]]:
    """The "processor" check request (engine_checks/process.py, without its path) for the files
    as the engine reads them: a legacy file where the model has one, else the nested entry of
    processor_config.json; the class the files name. None without processor files."""
    if not has_processor(model):
        return None
    nested = model.json_object(PROCESSOR_CONFIG)
    components: Dict[str, Any] = {}
    for name in sorted(set(LEGACY_FILES.values())):
        legacy = model.json_object(name) if model.state(name).exists else {}
        if legacy:
            components[_component(name, legacy)] = legacy
    for key, name in sorted(LEGACY_FILES.items()):
        if key not in components and not model.state(name).exists and isinstance(nested.get(key), dict):
            components[key] = nested[key]
    processor_class = None
    for name in CLASS_SOURCES:
        value = model.json_object(name).get("processor_class") if model.state(name).exists else None
        if isinstance(value, str) and value:
            processor_class = value
            break
    return {"processor_class": processor_class, "components": components}
