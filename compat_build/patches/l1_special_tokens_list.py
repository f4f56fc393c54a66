"""L1: transformers 4.x `_set_model_specific_special_tokens` accepts the list form of
`extra_special_tokens` that transformers 5 writes (why: `python3 -m common explain L1`).

The list is added to `additional_special_tokens`, 4.x's name for "these are special tokens", so
every id stays the one the author saved; a dict keeps 4.x's meaning (attribute names).
"""

from __future__ import annotations

from common.engine.patching import AnchorMissing, function_span, is_docstring

MARKER = "enginex-compat L1"
BLOCK = f"""\
if isinstance(special_tokens, (list, tuple)):
    # {MARKER}: transformers 5 saves extra_special_tokens as a list of tokens; 4.x's name for
    # that is additional_special_tokens (a dict here names attributes instead).
    known = [str(t) for t in self._special_tokens_map.get("additional_special_tokens") or []]
    extra = [t for t in special_tokens if isinstance(t, (str, AddedToken)) and str(t) not in known]
    self._special_tokens_map["additional_special_tokens"] = (
        list(self._special_tokens_map.get("additional_special_tokens") or []) + extra)
    self.extra_special_tokens = {{}}
    return
"""
MODULE = "transformers.tokenization_utils_base"


def transform(text: str) -> str:
    if MARKER in text:
        return text
    node, lines = function_span(text, "_set_model_specific_special_tokens", cls="SpecialTokensMixin")
    body = node.body
    first = body[1] if len(body) > 1 and is_docstring(body[0]) else body[0]
    if "special_tokens.keys()" not in "".join(lines[node.lineno - 1 : node.end_lineno]):
        raise AnchorMissing("_set_model_specific_special_tokens no longer calls special_tokens.keys()")
    indent = " " * first.col_offset
    block = "".join(indent + line if line.strip() else line for line in BLOCK.splitlines(keepends=True))
    at = first.lineno - 1
    return "".join(lines[:at]) + block + "".join(lines[at:])
