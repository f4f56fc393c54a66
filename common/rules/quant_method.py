"""QUANT: the checkpoint's quantization method is one the engine's vLLM cannot load.

`quantization_config.quant_method` in config.json picks vLLM's loader; a method the engine does
not have (gpt-oss's `mxfp4` on vLLM 0.5.5) fails the start with "Unknown quantization method".
The engine's methods come from its profile (vLLM's own QUANTIZATION_METHODS). No metadata
repair changes how weights are stored: the finding says which engine is needed.
"""

from __future__ import annotations

from .support.base import Context, Outcome, Rule


class Quantization(Rule):
    code = "QUANT"

    def check(self, ctx: Context) -> Outcome:
        quant = ctx.model.json_object("config.json").get("quantization_config")
        method = quant.get("quant_method") if isinstance(quant, dict) else None
        if not isinstance(method, str) or not method:
            return Outcome()
        methods = ctx.profile.quantization_methods
        if methods is None:
            return Outcome(
                findings=[self.finding("unverified", f"quantization method {method!r}: this profile does not list the engine's methods")]
            )
        if method.lower() in methods or ctx.user.has("--quantization"):
            return Outcome()
        return Outcome(
            findings=[
                self.finding(
                    "error",
                    f"quantization method {method!r} is not one vLLM {ctx.profile.vllm_version} loads ({', '.join(sorted(methods))})",
                )
            ]
        )


RULE = Quantization()
