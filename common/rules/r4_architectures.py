"""R4: `architectures` names a class the card's vLLM does not register.

vLLM 0.11.0 already serves such a model through its Transformers backend when the engine's
transformers has the class: there nothing is added. When neither knows the class (a fine-tune
exported under its own class name, or a class from a newer release) but the engine's transformers
knows the config's `model_type`, that model_type's canonical causal-LM class (from transformers'
auto mappings, snapshotted into the card profile) is what transformers itself would build for the
weights, and the repair points `--hf-overrides {"architectures": [...]}` at it. A hand-listed
alias is used only when a test proves it. Otherwise the finding names the class and says the
model needs a newer engine; nothing is added. A user's `--hf-overrides` is merged, not replaced.
"""

from __future__ import annotations

from ..architecture_aliases import ALIASES
from ..plan import Repair
from .base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Optional


class Architectures(Rule):
    code = "R4"
    title = "architecture not registered in the engine"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "--hf-overrides architectures -> the model_type's canonical class (or a proven alias); else a newer engine"
    log_signatures = (
        r"Model architectures \[[^\]]*\] are not supported for now",
        r"\S+ is not a registered model in the Transformers library",
    )

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        raw = config.get("architectures")
        if raw is None:
            return outcome
        if not (isinstance(raw, list) and raw and all(isinstance(a, str) and a for a in raw)):
            outcome.findings.append(self.finding(
                "warning", f"config.json architectures is {raw!r}, not a list of class names; not checked"))
            return outcome
        profile = ctx.profile
        if profile.architectures is None:
            return outcome  # this profile has no vLLM registry; the image's own snapshot has one
        unknown = [a for a in raw if a not in profile.architectures]
        if not unknown:
            return outcome
        if all(a in profile.transformers_architectures for a in unknown):
            outcome.findings.append(self.finding(
                "info", f"{', '.join(unknown)} not registered in vLLM {profile.vllm_version}; it serves the model "
                        f"through its Transformers backend (transformers {profile.transformers_version} has the class)"))
            return outcome
        target = self._target(ctx, unknown)
        if target is None:
            model_type = ctx.facts.get("model_type")
            outcome.findings.append(self.finding(
                "error", f"architecture {', '.join(unknown)} (model_type {model_type!r}) is known neither to vLLM "
                         f"{profile.vllm_version} nor to transformers {profile.transformers_version}: this model "
                         "needs a newer engine"))
            return outcome
        target_class, why = target
        outcome.repairs.append(Repair(
            self.code, self.title, f"{', '.join(unknown)} is unknown to this engine; serving as {target_class} ({why})",
            hf_overrides={"architectures": [target_class]}))
        return outcome

    @staticmethod
    def _target(ctx: Context, unknown):
        profile = ctx.profile
        servable = profile.architectures | profile.transformers_architectures  # type: ignore[operator]
        if len(unknown) == 1 and ALIASES.get(unknown[0]) in servable:
            return ALIASES[unknown[0]], "proven alias"
        model_type: Optional[str] = ctx.facts.get("model_type")
        canonical = profile.model_type_architectures.get(model_type or "")
        if canonical and canonical in servable:
            return canonical, f"the canonical class of model_type {model_type!r} in transformers {profile.transformers_version}"
        return None


RULE = Architectures()
