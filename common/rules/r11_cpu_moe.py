"""R11: the engine is a CPU build whose fused MoE layer has no CPU path.

vLLM 0.5.5 builds Mixtral, Qwen2-MoE and DeepSeek-V2 on its FusedMoE layer, whose CPU path
raises at the first request ("The CPU backend currently does not support MoE"): the server is
up, and dies at the first answer. On the card the vendor's fused kernel runs that layer; a CPU
build of the same engine (what this project, and anyone without the card, runs it on) serves
none of them. Where the profile says so (profile facts `cpu_build`, the engine's own version
string, and `fused_moe_cpu`, read from its source), the image's plugin gives the layer a CPU
path: the engine's own routing, then each expert over its own tokens (the R7 shim's grouped
core). The card's image never gets it: its engine is no CPU build. Where the engine's model file
runs its decoder layer through a vendor module (R7's table: the BI-100 fork's Mixtral), that
module runs the experts and FusedMoE is never called: R11 stays out.
"""

from __future__ import annotations

from .support.base import Context, Outcome, Rule

# The model types whose engine model (vLLM 0.5.5's own, or the image's backport) runs its experts
# through FusedMoE.
MODEL_TYPES = ("deepseek_v2", "mixtral", "qwen2_moe", "qwen3_moe", "qwen3_5_moe", "qwen3_5_moe_text")


def vendor_layer_runs_experts(architectures: list) -> bool:
    """Whether the engine's model file for one of `architectures` imports a vendor layer module
    (present or shimmed by R7): the vendor's forward, not FusedMoE, then runs the experts."""
    from .r7_vendor_module_shim import SHIMMED_MODULES, engine_imports

    return any(
        set(architectures) & set(users) and engine_imports(model_file, dotted) for dotted, (users, model_file) in SHIMMED_MODULES.items()
    )


class CpuMoE(Rule):
    code = "R11"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        profile = ctx.profile
        if config.get("model_type") not in MODEL_TYPES or profile.cpu_build is not True or profile.fused_moe_cpu is not False:
            return outcome
        if vendor_layer_runs_experts(ctx.facts.get("architectures") or []):
            return outcome
        from ..vllm_plugin.compat_patches.cpu_moe import ENV
        from ..vllm_plugin.compat_plugin import PLUGIN_NAME
        from .support.plugin import blocker, plugin_repair

        detail = f"vLLM {profile.vllm_version} is a CPU build whose FusedMoE has no CPU path"
        blocked = blocker(ctx, weights=False)
        if blocked is not None:
            severity, why = blocked
            outcome.findings.append(self.finding(severity, f"{detail}, and the image's plugin cannot give it one: {why}"))
            return outcome
        outcome.repairs.append(
            plugin_repair(self.code, self.title, f"{detail}; {PLUGIN_NAME} runs the experts grouped by token", ENV, "grouped")
        )
        return outcome


RULE = CpuMoE()
