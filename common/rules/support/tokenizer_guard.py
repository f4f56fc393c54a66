"""When the tokenizer rules (R3, R3b) must keep their hands off."""

from __future__ import annotations


from ...model.tokenizer_files import remote_code_tokenizer
from .base import Context

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Optional


def tokenizer_hands_off(ctx: Context) -> Optional[str]:
    """Why the model's tokenizer is not ours to rewrite, or None."""
    if ctx.user.has("--tokenizer"):
        return "the arguments name their own --tokenizer"
    remote = remote_code_tokenizer(ctx.model)
    if remote:
        return f"it is a remote-code tokenizer ({remote})"
    _, problem = ctx.model.read_json("tokenizer_config.json")
    if problem is not None:
        return f"tokenizer_config.json is unusable ({problem.reason})"
    return None
