"""The scopes of the scoped rules (common/rules/__init__.py registers each rule with its scope):
what each rule's own tables can act on, so a model outside them never imports the rule.

C1_ARCHITECTURES is written by `python -m conformance judge` (and `run`) from the conformance
cells' results, never by hand; the others are the rules' own, held to their tables by
common/tests/test_codes.py.
"""

from __future__ import annotations

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
# R10: the architectures the runtime package ships a backport of (vllm_plugin/compat_backports),
# written from its table by `python -m compat_build.scopes`: the families an engine lacks, and
# classes the engine has, replaced for the configurations it computes otherwise (BACKPORTS'
# `replaces`: a window shorter than the context, Phi-3's partial rotary, every Gemma 2).
R10_ARCHITECTURES = (
    "Exaone4ForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "GraniteForCausalLM",
    "Ministral3ForCausalLM",
    "Mistral3ForConditionalGeneration",
    "MistralForCausalLM",
    "Olmo2ForCausalLM",
    "Phi3ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Qwen3_5ForCausalLM",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
    "Qwen3_5MoeForConditionalGeneration",
    "Starcoder2ForCausalLM",
)
# C1: per card, the architectures with a conformance cell C1 speaks for (conformance_cells.json:
# a cell that differs, or did not answer for a reason no other rule names). Written by
# `python -m conformance judge` from the cells (conformance/report.py: write_scope).
C1_ARCHITECTURES: Dict[str, Tuple[str, ...]] = {
    "hygon-k100": (
        "BloomForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "GptOssForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "Llama4ForCausalLM",
        "MptForCausalLM",
        "StableLmForCausalLM",
    ),
    "iluvatar-bi100": (
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "LlamaForCausalLM",
        "StableLmForCausalLM",
    ),
    "nv-a100": (
        "BloomForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "GptOssForCausalLM",
        "HunYuanDenseV1ForCausalLM",
        "Llama4ForCausalLM",
        "MptForCausalLM",
        "StableLmForCausalLM",
    ),
    "nv-a100@next": (
        "Cohere2ForCausalLM",
        "DbrxForCausalLM",
        "DeepseekV2ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Gemma3ForConditionalGeneration",
        "Ministral3ForCausalLM",
        "MptForCausalLM",
        "PhimoeForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "StableLmForCausalLM",
    ),
}
