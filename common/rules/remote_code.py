"""REMOTE_CODE: the model needs its own Python code, and the platform's arguments do not allow it.

A config or tokenizer can name classes in the model's own Python files (`auto_map`). The
engine's transformers uses its own class when it has one for the `model_type` (or the
`tokenizer_class`), and otherwise must run the model's code, which vLLM allows only with
`--trust-remote-code`; without it the start fails with "contains custom code which must be
executed". Some engines also read a few model types with config classes of their own, whatever
`auto_map` says: vLLM 0.11 reads Falcon's original `RefinedWeb` config with its RWConfig before
transformers is asked, while 0.5.5 asks transformers first, which refuses it (which model types,
and whether before transformers, is the profile's `own_config_classes`, probed on each engine).
No repair can stand in for the model's code, and the preflight never adds the flag: the finding
says so before the platform tries. With the flag given, the model is judged as usual.
"""

from __future__ import annotations

from ..model.tokenizer_files import tokenizer_config
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List


class RemoteCode(Rule):
    code = "REMOTE_CODE"

    def check(self, ctx: Context) -> Outcome:
        if ctx.user.has("--trust-remote-code"):
            return Outcome()
        outcome = Outcome()
        needs: List[str] = []
        config = ctx.model.json_object("config.json")
        reader = config_reader(config, ctx.profile)
        entry = _auto(config, "AutoConfig")
        if reader == NEEDS_CODE:
            needs.append(
                f"config.json maps AutoConfig to {entry!r} and transformers "
                f"{ctx.profile.transformers_version} has no {config.get('model_type')!r} config of its own"
            )
        elif reader == UNKNOWN:
            outcome.findings.append(
                self.finding(
                    "unverified",
                    f"config.json maps AutoConfig to {entry!r}; this profile cannot say whether vLLM "
                    f"{ctx.profile.vllm_version} reads model_type {config.get('model_type')!r} with a config class of its own",
                )
            )
        elif reader.startswith(ENGINE_PREFIX):
            outcome.findings.append(
                self.finding(
                    "info",
                    f"config.json maps AutoConfig to {entry!r}; vLLM {ctx.profile.vllm_version} reads model_type "
                    f"{config.get('model_type')!r} with its own {reader[len(ENGINE_PREFIX) :]}, without the model's code",
                )
            )
        tokenizer = tokenizer_config(ctx.model)
        declared = tokenizer.get("tokenizer_class")
        entry = _auto(tokenizer, "AutoTokenizer") or _auto(config, "AutoTokenizer")
        if entry and not (isinstance(declared, str) and ctx.profile.knows_tokenizer_class(declared)):
            needs.append(
                f"the tokenizer maps AutoTokenizer to {entry!r} and transformers "
                f"{ctx.profile.transformers_version} has no class {declared!r}"
            )
        if needs:
            outcome.findings.append(
                self.finding(
                    "error",
                    f"{'; '.join(needs)}: the engine must run the model's own code, which it does only with "
                    "--trust-remote-code (not given; never added by the image)",
                )
            )
        return outcome


# How the engine reads a config.json whose auto_map names the model's own config class.
NO_CODE_NAMED = ""  # no AutoConfig in auto_map: not this rule's question
TRANSFORMERS = "transformers"  # transformers has a config class of its own for the model_type
ENGINE_PREFIX = "engine:"  # + the class: the engine's own config class reads it, before transformers
NEEDS_CODE = "needs code"  # only the model's code reads it
UNKNOWN = "unknown"  # the profile cannot say


def config_reader(config: dict, profile) -> str:
    """Who reads a config.json that maps AutoConfig to the model's own code, without that code:
    one of the constants above. R4 stands back where only the model's code could read it."""
    if not _auto(config, "AutoConfig"):
        return NO_CODE_NAMED
    model_type = config.get("model_type")
    own = profile.own_config_classes
    if own is not None and isinstance(model_type, str) and model_type in own:
        return ENGINE_PREFIX + own[model_type]
    known = profile.config_model_types
    if known is not None and model_type in known:
        return TRANSFORMERS
    if known is None or own is None:
        return UNKNOWN
    return NEEDS_CODE


def _auto(config: dict, key: str) -> str:
    auto_map = config.get("auto_map")
    value = auto_map.get(key) if isinstance(auto_map, dict) else None
    if isinstance(value, list):  # AutoTokenizer: [slow, fast]
        value = next((v for v in value if isinstance(v, str)), None)
    return value if isinstance(value, str) else ""


RULE = RemoteCode()
