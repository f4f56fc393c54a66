"""The rule registry: one line per rule, in the order their repairs are applied."""

from __future__ import annotations


from . import (
    adapter_only,
    config_support,
    h1_head_size,
    h2_null_head_dim,
    quantization,
    r2_chat_template,
    r3_extra_special_tokens,
    r3b_tokenizer_class,
    r3c_tokenizer_config,
    r4_architectures,
    r5_config_format,
    r6_processor_files,
    r7_vendor_module_shim,
    r8_fused_experts,
    r9_vision_tower_names,
    r10_backport,
    remote_code,
)
from .base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Tuple

REGISTRY: Tuple[Rule, ...] = (
    # Checks first: what no repair fixes.
    adapter_only.RULE,
    config_support.RULE,
    remote_code.RULE,
    quantization.RULE,
    r2_chat_template.RULE,
    # Before the tokenizer rules: a processor that fails on the model path's tokenizer logs
    # R3b's line too, and only R6's view reaches it (triage: the first matching code wins).
    r6_processor_files.RULE,
    r3_extra_special_tokens.RULE,
    r3b_tokenizer_class.RULE,
    r3c_tokenizer_config.RULE,
    # Before R4: triage names R10 for the refusal of a class the image has a backport of.
    r10_backport.RULE,
    r4_architectures.RULE,
    r5_config_format.RULE,
    h1_head_size.RULE,
    h2_null_head_dim.RULE,
    r7_vendor_module_shim.RULE,
    r8_fused_experts.RULE,
    r9_vision_tower_names.RULE,
)


__all__ = ["REGISTRY", "Context", "Outcome", "Rule"]
