"""R4: `architectures` names a class the card's vLLM does not register.

What the engine can serve is read from its profile: its model registry and, on engines that
have one (vLLM 0.11), its Transformers backend with the classes that backend takes
(`is_backend_compatible()`: T5 is not). A class the backend takes is left to it (vLLM falls back
by itself). Otherwise, when the engine's transformers knows the config's `model_type`, that
model_type's canonical causal-LM class (transformers' auto mapping, snapshotted into the
profile) is what transformers itself would build for the weights: if the engine serves that
class, the repair serves the model as it (`--hf-overrides {"architectures": [...]}` where the
engine has the flag, a model view with a rewritten config.json on vLLM 0.5.5). Otherwise the
finding names the class and says the model needs a newer engine; nothing is added (a class the
image ships a backport of is R10's: it serves it, or says why not). A profile
without a registry snapshot cannot tell: the finding says "unverified".

An `auto_map` naming the model's own modeling classes changes none of this: vLLM looks its
registry up whatever `auto_map` says (0.5.5 only ever does that, so a DeepSeek-V3 checkpoint
with `auto_map` to `modeling_deepseek` is refused there). vLLM 0.11 turns to the model's own class
only when no class of the list is registered and transformers has none of that name: its
Transformers backend then loads the class `auto_map` names from the model's files and takes it
if that class says it is compatible, which shows only at start: "unverified". Where only the
model's code can read config.json and --trust-remote-code is not given, the start stops there
(REMOTE_CODE), before any architecture is looked up: R4 stands back.
"""

from __future__ import annotations

from ..plan import Repair
from .support.base import Context, Outcome, Rule
from .remote_code import NEEDS_CODE, config_reader

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List, Optional


class Architectures(Rule):
    code = "R4"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        raw = config.get("architectures")
        if raw is None:
            return outcome
        if not (isinstance(raw, list) and raw and all(isinstance(a, str) and a for a in raw)):
            outcome.findings.append(
                self.finding("warning", f"config.json architectures is {raw!r}, not a list of class names; not checked")
            )
            return outcome
        profile = ctx.profile
        if not ctx.user.has("--trust-remote-code") and config_reader(config, profile) == NEEDS_CODE:
            return outcome  # the start stops at config.json: REMOTE_CODE says what that needs
        registry = profile.architectures
        if registry is None:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"this profile of {profile.card} has no snapshot of vLLM's model registry; "
                    f"whether it serves {', '.join(raw)} is known only inside the image",
                )
            )
            return outcome
        unknown = [a for a in raw if a not in registry]
        if len(unknown) < len(raw):
            return outcome  # vLLM takes the first class of the list it registers
        if any(a in _backported_architectures() for a in raw):
            return outcome  # the image has a backport of it: R10 serves it, or says why it cannot
        servable = profile.servable_architectures() or registry
        if any(a in servable for a in unknown):
            outcome.findings.append(
                self.finding(
                    "info",
                    f"{', '.join(unknown)} not registered in vLLM {profile.vllm_version}; it serves the model "
                    f"through its Transformers backend (transformers {profile.transformers_version} has the class)",
                )
            )
            return outcome
        own_class = _own_model_class(config)
        # vLLM 0.11's backend asks transformers for the first class by name, and the model's own
        # class only when transformers has none of that name.
        if own_class and raw[0] not in profile.transformers_architectures and profile.transformers_backend is not False:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"{', '.join(unknown)} not registered in vLLM {profile.vllm_version}"
                    + (
                        f"; its Transformers backend then loads the model's own class ({own_class!r}, auto_map) and takes it "
                        "only if that class says it is compatible, which shows at start (the model's code is not run here)"
                        if profile.transformers_backend
                        else f"; this profile cannot say whether vLLM {profile.vllm_version} loads the model's own class ({own_class!r}, auto_map)"
                    ),
                )
            )
            return outcome
        model_type: Optional[str] = ctx.facts.get("model_type")
        target = profile.model_type_architectures.get(model_type or "")
        if target and target in servable:
            outcome.repairs.append(self._repair(unknown, target, model_type, profile.transformers_version))
            return outcome
        outcome.findings.append(self.finding("error", self._why_not(ctx, unknown, model_type, target)))
        return outcome

    def _repair(self, unknown: List[str], target: str, model_type: Optional[str], version: str) -> Repair:
        repair = Repair(
            self.code,
            self.title,
            f"{', '.join(unknown)} is unknown to this engine; serving as {target} (the canonical class "
            f"of model_type {model_type!r} in transformers {version})",
        )
        repair.config_edits = {"architectures": [target]}
        return repair

    @staticmethod
    def _why_not(ctx: Context, unknown: List[str], model_type: Optional[str], target: Optional[str]) -> str:
        profile = ctx.profile
        names = ", ".join(unknown)
        engine = f"vLLM {profile.vllm_version}"
        if target and target not in (profile.servable_architectures() or ()):
            return (
                f"architecture {names} (model_type {model_type!r}): {engine} serves neither it nor the "
                f"model_type's class {target}: this model needs a newer engine"
            )
        if profile.transformers_backend and all(a in profile.transformers_architectures for a in unknown):
            return (
                f"architecture {names} is not registered in {engine}, and its Transformers backend does not "
                f"take it (is_backend_compatible() is False in transformers {profile.transformers_version}): "
                "this model needs a newer engine"
            )
        backend = "" if profile.transformers_backend else f" ({engine} has no Transformers backend)"
        return (
            f"architecture {names} (model_type {model_type!r}) is known neither to {engine} nor, as a "
            f"servable class, to transformers {profile.transformers_version}{backend}: this model needs a newer engine"
        )


def _own_model_class(config: dict) -> str:
    """The model's own modeling class auto_map names (AutoModel*), or ""."""
    auto_map = config.get("auto_map")
    if not isinstance(auto_map, dict):
        return ""
    for key, value in auto_map.items():
        if isinstance(key, str) and key.startswith("AutoModel") and isinstance(value, str) and value:
            return value
    return ""


RULE = Architectures()


def _backported_architectures():
    """The classes R10 serves where the engine lacks them: its scope in the registry (read at
    check time: the registry module imports this one), less the backports built over an engine
    class, which need that class."""
    from ..vllm_plugin.compat_backports import replacing
    from .support.scopes import R10_ARCHITECTURES

    return tuple(a for a in R10_ARCHITECTURES if not replacing(a))
