"""R3b: a `tokenizer_class` the engine's transformers does not have.

transformers 5 saves generic fast tokenizers as `TokenizersBackend` (and some authors use
`TiktokenTokenizer` or classes of newer releases); the engine's transformers raises `Tokenizer
class X does not exist or is not currently imported` and vLLM never starts. When the model ships
files a class of the engine can read, the overlay names that class instead, and the repair is
kept only if the overlay loads with the same special-token and probe-text ids.
"""

from __future__ import annotations


from ..plan import Repair
from ..model.tokenizer_files import tokenizer_config
from .support.base import Context, Outcome, Rule
from .support.tokenizer_guard import tokenizer_hands_off

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict

# The class of the engine's transformers that reads each kind of tokenizer files.
FALLBACK_CLASS: Dict[str, str] = {
    "fast": "PreTrainedTokenizerFast",
    "sentencepiece": "LlamaTokenizer",
    "bpe": "GPT2Tokenizer",
}


class UnknownTokenizerClass(Rule):
    code = "R3b"

    def check(self, ctx: Context) -> Outcome:
        kind = ctx.facts.get("tokenizer_kind")
        declared = tokenizer_config(ctx.model).get("tokenizer_class")
        if declared is None:
            return Outcome()  # no tokenizer_config.json at all is R3c's
        if isinstance(declared, str) and ctx.profile.knows_tokenizer_class(declared):
            return Outcome()
        problem = f"tokenizer_class {declared!r} does not exist in transformers {ctx.profile.transformers_version}"
        reason = tokenizer_hands_off(ctx)
        if reason:
            return Outcome(findings=[self.finding("warning", f"{problem}, but {reason}; not rewritten")])
        fallback = FALLBACK_CLASS.get(kind or "")
        if fallback is None or not ctx.profile.knows_tokenizer_class(fallback):
            return Outcome(
                findings=[
                    self.finding("error", f"{problem}, and the model's tokenizer files ({kind}) have no class of the engine to read them")
                ]
            )
        return Outcome(
            repairs=[
                Repair(
                    code=self.code,
                    title=self.title,
                    detail=f"{problem}; the overlay names {fallback}, which reads {kind} tokenizer files",
                    overlay={"tokenizer_config.json": {"tokenizer_class": fallback}},
                )
            ]
        )


RULE = UnknownTokenizerClass()
