"""Config classes for model types the engine's transformers lacks (R12).

transformers 4.55 (vLLM 0.5.5's) has no class for the config.json that transformers 5 saves for
Gemma 4, Ministral 3 or Qwen3.5: AutoConfig refuses the model before vLLM looks at it. Each
module here holds a `PretrainedConfig` subclass for one family, written for transformers 4.55
from the facts of transformers 5's own class (attribute names, defaults, sub-configs), plus the
4.x names the engine reads (`rope_theta`, `rope_scaling`) derived from 5.x's `rope_parameters`.

COMPAT_CONFIGS=<model_type,...> (set by R12's repair): the plugin directory's sitecustomize
registers each named class with AutoConfig at interpreter start, before the engine reads
config.json (vLLM 0.5.5 loads its plugins too late for that); doctor's engine check
(engine_checks/process.py) registers them the same way before it asks AutoConfig. This module is
standard library only (the preflight reads CLASSES on every start); a family's module imports
transformers, so it is imported only where a class is registered.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Iterable, List

ENV = "COMPAT_CONFIGS"

# model_type -> "module:Class" of this package. A composite type (gemma4, qwen3_5) nests its text
# config's type, which has its own line.
CLASSES = {
    "gemma4": "gemma4:Gemma4Config",
    "gemma4_text": "gemma4:Gemma4TextConfig",
    "ministral3": "ministral3:Ministral3Config",
    "qwen3_5": "qwen3_5:Qwen3_5Config",
    "qwen3_5_text": "qwen3_5:Qwen3_5TextConfig",
    "qwen3_5_moe": "qwen3_5:Qwen3_5MoeConfig",
    "qwen3_5_moe_text": "qwen3_5:Qwen3_5MoeTextConfig",
}


def load(model_type: str) -> type:
    """The class for `model_type` (imports its module, hence transformers)."""
    module, name = CLASSES[model_type].split(":")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def register(model_types: Iterable[str]) -> List[str]:
    """Register with AutoConfig the classes of `model_types` the running transformers lacks; a
    type it knows keeps its own class (never overridden), one without a class here is skipped.
    Returns the types registered by this call."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    done = []
    for model_type in model_types:
        if model_type not in CLASSES or model_type in CONFIG_MAPPING:
            continue
        AutoConfig.register(model_type, load(model_type))
        done.append(model_type)
    return done


def parse(value: str) -> List[str]:
    """The model types a COMPAT_CONFIGS value names."""
    return [t.strip() for t in value.split(",") if t.strip()]
