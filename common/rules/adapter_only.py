"""ADAPTER: the directory holds a LoRA/PEFT adapter, not a model.

`adapter_config.json` without `config.json` is an adapter: weight deltas for a base model that
is not in the directory. vLLM cannot serve it alone (it looks for config.json and fails); it is
served as `--enable-lora --lora-modules` on top of its base model. The finding names the base
model the adapter was trained on.
"""

from __future__ import annotations

from .support.base import Context, Outcome, Rule


class AdapterOnly(Rule):
    code = "ADAPTER"

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
