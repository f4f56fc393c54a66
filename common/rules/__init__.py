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
    quantization,
    r2_chat_template,
    r3_extra_special_tokens,
    r3b_tokenizer_class,
    r3c_tokenizer_config,
    r4_architectures,
    r5_config_format,
    r12_config_classes,
    remote_code,
)
from .base import Context, Outcome, Rule, Scoped

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, Tuple

# The scopes of the scoped rules: what each rule's own tables can act on (test_codes.py holds
# them to those tables). R6: transformers 5's nested processor file; R7: the architectures whose
# engine model file imports a shimmed vendor module; R8: the MoE model types transformers 5
# stores fused; R9: the vision-language model types it saves with a flat tower; R10: the
# architectures a backport exists for.
R6_FILES = ("processor_config.json",)
R7_ARCHITECTURES = ("MixtralForCausalLM",)
R8_MODEL_TYPES = (
    "deepseek_v2",
    "deepseek_v3",
    "dots1",
    "ernie4_5_moe",
    "flex_olmo",
    "glm4_moe",
    "hunyuan_v1_moe",
    "minimax",
    "mixtral",
    "olmoe",
    "qwen2_moe",
    "qwen3_moe",
)
# R11: the model types whose engine model (its own or the backport) runs its experts through
# FusedMoE (r11_cpu_moe.py).
R11_MODEL_TYPES = ("deepseek_v2", "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_5_moe", "qwen3_5_moe_text")
R9_MODEL_TYPES = ("aya_vision", "gemma3", "llava", "llava_next", "llava_next_video", "llava_onevision", "paligemma")
# R10: the architectures the runtime package ships a backport of (vllm_plugin/compat_backports).
R10_ARCHITECTURES = (
    "Exaone4ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "GraniteForCausalLM",
    "Ministral3ForCausalLM",
    "Mistral3ForConditionalGeneration",
    "Olmo2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    # Classes the engine has, replaced for the configurations it computes otherwise (BACKPORTS'
    # `replaces`: a window shorter than the context, Phi-3's partial rotary, every Gemma 2).
    "Gemma2ForCausalLM",
    "MistralForCausalLM",
    "Phi3ForCausalLM",
    "Starcoder2ForCausalLM",
)
# C1: per card, the architectures with a conformance cell C1 speaks for (conformance_cells.json:
# a cell that differs, or did not answer for a reason no other rule names; a test holds this
# table to that file, `make conformance` prints it when they part).
C1_ARCHITECTURES: Dict[str, Tuple[str, ...]] = {
    "hygon-k100": (
        "BloomForCausalLM",
        "Cohere2ForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Exaone4ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "GptOssForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "Llama4ForCausalLM",
        "MinistralForCausalLM",
        "MistralForCausalLM",
        "MptForCausalLM",
        "Olmo3ForCausalLM",
        "Phi3ForCausalLM",
        "Qwen3NextForCausalLM",
        "StableLmForCausalLM",
        "Starcoder2ForCausalLM",
    ),
    "iluvatar-bi100": (
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "LlamaForCausalLM",
        "StableLmForCausalLM",
    ),
    "nv-a100": (
        "BloomForCausalLM",
        "Cohere2ForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Exaone4ForCausalLM",
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "GptOssForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "Llama4ForCausalLM",
        "MinistralForCausalLM",
        "MistralForCausalLM",
        "MptForCausalLM",
        "Olmo3ForCausalLM",
        "Phi3ForCausalLM",
        "Qwen3NextForCausalLM",
        "StableLmForCausalLM",
        "Starcoder2ForCausalLM",
    ),
    "nv-a100@next": (
        "Cohere2ForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Gemma4ForConditionalGeneration",
        "Ministral3ForCausalLM",
        "MptForCausalLM",
        "PhimoeForCausalLM",
        "Qwen3NextForCausalLM",
        "Qwen3_5ForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForCausalLM",
        "StableLmForCausalLM",
    ),
}

REGISTRY: Tuple[Rule, ...] = (
    # Checks first: what no repair fixes.
    adapter_only.RULE,
    # Before CONFIG: the model types it registers a config class for are known to CONFIG.
    r12_config_classes.RULE,
    config_support.RULE,
    remote_code.RULE,
    quantization.RULE,
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


__all__ = ["REGISTRY", "Context", "Outcome", "Rule", "Scoped"]
