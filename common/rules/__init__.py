"""The rule registry: one line per rule, in the order their repairs are applied.

A rule that can only concern some files or model types is registered with its scope (`Scoped`):
its module is imported only for a model inside that scope, so a clean model pays nothing for it.
"""

from __future__ import annotations


from . import (
    adapter_only,
    config_support,
    ctx_context_length,
    h1_head_size,
    h2_null_head_dim,
    kv_memory,
    quant_method,
    r2_chat_template,
    r3_extra_special_tokens,
    r3b_tokenizer_class,
    r3c_tokenizer_config,
    r4_architectures,
    r5_config_format,
    r12_config_classes,
    r13_config_names,
    remote_code,
)
from .support.base import Context, Outcome, Rule, Scoped
from .support.scopes import (
    C1_ARCHITECTURES,
    R6_FILES,
    R7_ARCHITECTURES,
    R8_MODEL_TYPES,
    R9_MODEL_TYPES,
    R10_ARCHITECTURES,
    R11_MODEL_TYPES,
)

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Tuple

REGISTRY: Tuple[Rule, ...] = (
    # Checks first: what no repair fixes.
    adapter_only.RULE,
    # Before CONFIG: the model types it registers a config class for are known to CONFIG.
    r12_config_classes.RULE,
    config_support.RULE,
    remote_code.RULE,
    quant_method.RULE,
    r2_chat_template.RULE,
    # Before the tokenizer rules: a processor that fails on the model path's tokenizer logs
    # R3b's line too, and only R6's view reaches it (triage: the first matching code wins).
    Scoped("r6_processor_files", "R6", files=R6_FILES),
    r3_extra_special_tokens.RULE,
    r3b_tokenizer_class.RULE,
    r3c_tokenizer_config.RULE,
    # Before R4: triage names R10 for the refusal of a class the image has a backport of.
    Scoped("r10_backport", "R10", architectures=R10_ARCHITECTURES),
    r4_architectures.RULE,
    r5_config_format.RULE,
    # After R5: a nested text_config both give whole keeps the keys of both (model_view.merge_edits).
    r13_config_names.RULE,
    h1_head_size.RULE,
    h2_null_head_dim.RULE,
    # doctor only: the weights and one request's KV cache against the card's memory.
    kv_memory.RULE,
    ctx_context_length.RULE,
    Scoped("r7_vendor_module_shim", "R7", architectures=R7_ARCHITECTURES),
    Scoped("r8_fused_experts", "R8", model_types=R8_MODEL_TYPES),
    Scoped("r9_vision_tower_names", "R9", model_types=R9_MODEL_TYPES),
    Scoped("r11_cpu_moe", "R11", model_types=R11_MODEL_TYPES),
    # Last: what the engine computes once it started, for the configurations the matrix found
    # wrong or could not prove.
    Scoped("c1_conformance", "C1", card_architectures=C1_ARCHITECTURES),
)


__all__ = [
    "C1_ARCHITECTURES",
    "R6_FILES",
    "R7_ARCHITECTURES",
    "R8_MODEL_TYPES",
    "R9_MODEL_TYPES",
    "R10_ARCHITECTURES",
    "R11_MODEL_TYPES",
    "REGISTRY",
    "Context",
    "Outcome",
    "Rule",
    "Scoped",
]
