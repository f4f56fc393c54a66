"""The facts of a model the JSON contract reports, derived from metadata alone."""

from __future__ import annotations


from .headsize import detect_head_size
from .modeldir import ModelDir
from .tokenizer_files import chat_template_source, tokenizer_config, tokenizer_kind

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict


def gather_facts(model: ModelDir) -> Dict[str, Any]:
    config = model.json_object("config.json")
    architectures = config.get("architectures")
    if not (isinstance(architectures, list) and all(isinstance(a, str) for a in architectures)):
        architectures = None
    model_type = config.get("model_type") if isinstance(config.get("model_type"), str) else None
    head = detect_head_size(config) if config else None
    tokenizer_class = tokenizer_config(model).get("tokenizer_class")
    return {
        "architectures": architectures,
        "model_type": model_type,
        "head_size": head.value if head else None,
        "head_size_source": head.source if head else None,
        "tokenizer_kind": tokenizer_kind(model),
        "tokenizer_class": tokenizer_class if isinstance(tokenizer_class, str) else None,
        "chat_template_source": chat_template_source(model),
    }
