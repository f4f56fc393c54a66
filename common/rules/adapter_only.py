"""ADAPTER: the directory holds a LoRA/PEFT adapter, not a model.

`adapter_config.json` without `config.json` is an adapter: weight deltas for a base model that
is not in the directory. vLLM cannot serve it alone (it looks for config.json and fails); it is
served as `--enable-lora --lora-modules` on top of its base model. The finding names the base
model the adapter was trained on.
"""

from __future__ import annotations

from ..code_kinds import CHECK
from .support.base import Context, Outcome, Rule


class AdapterOnly(Rule):
    code = "ADAPTER"
    kind = CHECK
    title = "an adapter, not a model"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "submit the base model (merged with the adapter, or serve the adapter with --enable-lora on top of it)"
    # What vLLM prints for a directory without config.json says nothing of an adapter (0.11:
    # "Invalid repository ID or local directory", 0.5.5: "Unrecognized model"); the model
    # directory tells, so no log line claims this code.
    log_signatures = ()

    def check(self, ctx: Context) -> Outcome:
        if ctx.model.state("config.json").exists or not ctx.model.state("adapter_config.json").exists:
            return Outcome()
        base = ctx.model.json_object("adapter_config.json").get("base_model_name_or_path")
        named = f" for base model {base!r}" if isinstance(base, str) and base else ""
        return Outcome(
            findings=[
                self.finding(
                    "error", f"adapter_config.json and no config.json: this is an adapter{named}, not a model; vLLM cannot serve it alone"
                )
            ]
        )


RULE = AdapterOnly()
