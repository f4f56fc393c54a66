"""R3c: a fast tokenizer shipped without tokenizer_config.json.

Some exports ship `tokenizer.json` alone. The engine's transformers then takes the class
config.json's model_type maps to, with that class's defaults instead of the author's: a Llama
model gets LlamaTokenizerFast, which invents `<s>`, `</s>` and `<unk>` as new ids past the
model's vocabulary when the vocabulary lacks them and prepends that `<s>` to every prompt: vLLM
0.11.0 serves it (the id is a padding row of its embedding) and answers with wrong text, nothing
in the log. A model_type with no tokenizer of its own does not start at all. The overlay writes the
tokenizer_config.json the author's library would have: PreTrainedTokenizerFast (tokenizer.json's
own pre- and post-processing, no class defaults) and the special tokens from
special_tokens_map.json when the model has one, else from config.json's (or
generation_config.json's) token ids looked up in tokenizer.json. It is kept only when it loads
with the ids tokenizer.json gives. An engine on transformers 5 reads tokenizer.json alone as
written and gets nothing.
"""

from __future__ import annotations

from ..model.tokenizer_files import token_for_id
from ..plan import Repair
from .support.base import Context, Outcome, Rule
from .support.tokenizer_guard import tokenizer_hands_off

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List

CLASS = "PreTrainedTokenizerFast"
# The class an engine's transformers reads a bare tokenizer.json with when it has it (transformers 5).
GENERIC_BACKEND = "TokenizersBackend"
# tokenizer_config.json key <- the config.json / generation_config.json id that names it.
SPECIAL_IDS = (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"), ("pad_token", "pad_token_id"))
ID_SOURCES = ("config.json", "generation_config.json")


class MissingTokenizerConfig(Rule):
    code = "R3c"

    def check(self, ctx: Context) -> Outcome:
        if ctx.facts.get("tokenizer_kind") != "fast" or ctx.model.state("tokenizer_config.json").exists:
            return Outcome()
        if ctx.profile.knows_tokenizer_class(GENERIC_BACKEND):
            # transformers 5 (the @next engines) loads tokenizer.json alone through its generic
            # backend, as written: no class defaults, nothing invented. Seen with 5.19.
            return Outcome()
        reason = tokenizer_hands_off(ctx)
        if reason:
            return Outcome(findings=[self.finding("warning", f"no tokenizer_config.json, but {reason}; not written")])
        if not ctx.profile.knows_tokenizer_class(CLASS):
            return Outcome(findings=[self.finding("error", f"no tokenizer_config.json and no {CLASS} in the engine's transformers")])
        written: Dict[str, Any] = {"tokenizer_class": CLASS}
        missing: List[str] = []
        if not ctx.model.has("special_tokens_map.json"):  # else the engine's transformers reads that file
            tokenizer = ctx.model.json_object("tokenizer.json")
            for key, id_key in SPECIAL_IDS:
                token_id = _first_id(ctx, id_key)
                if token_id is None:
                    continue
                text = token_for_id(tokenizer, token_id)
                if text is None:
                    missing.append(f"{id_key} {token_id!r}")
                else:
                    written[key] = text
        detail = "tokenizer_config.json written: " + ", ".join(f"{k}={v!r}" for k, v in written.items())
        if missing:
            detail += f" ({', '.join(missing)} not in tokenizer.json: left unset)"
        return Outcome(repairs=[Repair(self.code, self.title, detail, overlay={"tokenizer_config.json": written})])


def _first_id(ctx: Context, key: str) -> Any:
    """The model's id for a special token: config.json first; a list (several eos) gives its first."""
    for name in ID_SOURCES:
        value = ctx.model.json_object(name).get(key)
        if isinstance(value, list):
            value = value[0] if value else None
        if value is not None:
            return value
    return None


RULE = MissingTokenizerConfig()
