"""REMOTE_CODE: the model needs its own Python code, and the platform's arguments do not allow it.

A config or tokenizer can name classes in the model's own Python files (`auto_map`). The
engine's transformers uses its own class when it has one for the `model_type` (or the
`tokenizer_class`), and otherwise must run the model's code, which vLLM allows only with
`--trust-remote-code`; without it the start fails with "contains custom code which must be
executed". No repair can stand in for the model's code, and the preflight never adds the flag:
the finding says so before the platform tries. With the flag given, the model is judged as usual.
"""

from __future__ import annotations

from ..tokenizer_files import tokenizer_config
from .base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import List


class RemoteCode(Rule):
    code = "REMOTE_CODE"
    kind = "runtime check"
    title = "the model needs its own Python code"
    doc = __doc__.split("\n\n", 1)[1].strip()
    fix = "pass --trust-remote-code if the platform allows it; no repair can stand in for the model's code"
    # Healthy logs print `trust_remote_code=True` in the engine config: only the refusal counts.
    log_signatures = (r"Please pass the argument `trust_remote_code=True`", r"contains custom code which must be executed")

    def check(self, ctx: Context) -> Outcome:
        if ctx.user.has("--trust-remote-code"):
            return Outcome()
        needs: List[str] = []
        config = ctx.model.json_object("config.json")
        model_type = config.get("model_type")
        known_types = ctx.profile.config_model_types
        if _auto(config, "AutoConfig") and known_types is not None and model_type not in known_types:
            needs.append(
                f"config.json maps AutoConfig to {_auto(config, 'AutoConfig')!r} and transformers "
                f"{ctx.profile.transformers_version} has no {model_type!r} config of its own"
            )
        tokenizer = tokenizer_config(ctx.model)
        declared = tokenizer.get("tokenizer_class")
        entry = _auto(tokenizer, "AutoTokenizer") or _auto(config, "AutoTokenizer")
        if entry and not (isinstance(declared, str) and ctx.profile.knows_tokenizer_class(declared)):
            needs.append(
                f"the tokenizer maps AutoTokenizer to {entry!r} and transformers "
                f"{ctx.profile.transformers_version} has no class {declared!r}"
            )
        if not needs:
            return Outcome()
        return Outcome(
            findings=[
                self.finding(
                    "error",
                    f"{'; '.join(needs)}: the engine must run the model's own code, which it does only with "
                    "--trust-remote-code (not given; never added by the image)",
                )
            ]
        )


def _auto(config: dict, key: str) -> str:
    auto_map = config.get("auto_map")
    value = auto_map.get(key) if isinstance(auto_map, dict) else None
    if isinstance(value, list):  # AutoTokenizer: [slow, fast]
        value = next((v for v in value if isinstance(v, str)), None)
    return value if isinstance(value, str) else ""


RULE = RemoteCode()
