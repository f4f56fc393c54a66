"""R3: `extra_special_tokens` written as a list by transformers 5.

transformers 4.x reads `extra_special_tokens` as a dict of attribute name -> token and fails with
`AttributeError: 'list' object has no attribute 'keys'` on the list form v5 writes (whether the
engine's transformers reads the list is asked of it when its profile is made). Moving the
list into `additional_special_tokens` keeps 4.x's meaning and every special-token id (turning it
into `{t: t}` would load, but invents attributes named like the tokens).
"""

from ..model.tokenizer_files import special_token_strings, tokenizer_config
from ..plan import Repair
from .support.base import Context, Outcome, Rule
from .support.tokenizer_guard import tokenizer_hands_off


class ExtraSpecialTokensList(Rule):
    code = "R3"

    def check(self, ctx: Context) -> Outcome:
        config = tokenizer_config(ctx.model)
        extra = config.get("extra_special_tokens")
        if not isinstance(extra, list) or ctx.profile.reads_extra_special_tokens_list:
            return Outcome()  # not the list form, or an engine whose transformers reads it (5.x)
        reason = tokenizer_hands_off(ctx)
        if reason:
            return Outcome(findings=[self.finding("warning", f"extra_special_tokens is a list, but {reason}; not rewritten")])
        existing = config.get("additional_special_tokens")
        existing = list(existing) if isinstance(existing, list) else []
        have = set(special_token_strings(existing))
        moved = [t for t in extra if special_token_strings([t]) and special_token_strings([t])[0] not in have]
        return Outcome(
            repairs=[
                Repair(
                    code=self.code,
                    title=self.title,
                    detail=f"moved {len(extra)} token(s) from extra_special_tokens to additional_special_tokens",
                    overlay={
                        "tokenizer_config.json": {
                            "extra_special_tokens": None,
                            "additional_special_tokens": existing + moved,
                        }
                    },
                )
            ]
        )


RULE = ExtraSpecialTokensList()
