"""Build-time library patches (L1, L2), applied inside the image by apply_patches.py.

Each entry: the module it changes (found through the image's Python), and a transform for the
shared helper common.patching. A card lists the codes it needs in build_matrix.toml.

L1  transformers 4.x `_set_model_specific_special_tokens` accepts the list form of
    `extra_special_tokens` that transformers 5 writes. 4.x calls `.keys()` on it and every such
    tokenizer fails to load (AttributeError: 'list' object has no attribute 'keys'). In 4.x the
    dict form names attributes (`image_token` -> `tok.image_token_id`); a v5 list means "these are
    special tokens", which 4.x calls `additional_special_tokens`: the patch adds them there, so
    every id stays the one the author saved. The runtime R3 overlay repairs the same case per
    model; L1 covers transformers loads the overlay cannot reach (remote code, pipelines).

L2  vLLM's Triton attention head-size check. Decided from vLLM 0.11.0's real
    `vllm/v1/attention/backends/triton_attn.py`: `validate_head_size` rejects only sizes below 32
    (the kernel's real limit), and with no backend forced vLLM falls back to FLEX_ATTENTION for
    sizes FlashAttention lacks. No card on vLLM 0.11.0 needs the patch; L2 is a check that fails
    the build if an image's vLLM reintroduced a fixed head-size list the preflight cannot see
    (then H1's policy for that card must be revisited). tests/test_library_patches.py holds the
    evidence on the real file.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, NamedTuple

from common.patching import AnchorMissing, function_span

L1_MARKER = "enginex-compat L1"
L1_BLOCK = f'''\
if isinstance(special_tokens, (list, tuple)):
    # {L1_MARKER}: transformers 5 saves extra_special_tokens as a list of tokens; 4.x's name for
    # that is additional_special_tokens (a dict here names attributes instead).
    known = [str(t) for t in self._special_tokens_map.get("additional_special_tokens") or []]
    extra = [t for t in special_tokens if isinstance(t, (str, AddedToken)) and str(t) not in known]
    self._special_tokens_map["additional_special_tokens"] = (
        list(self._special_tokens_map.get("additional_special_tokens") or []) + extra)
    self.extra_special_tokens = {{}}
    return
'''


def l1_special_tokens_list(text: str) -> str:
    if L1_MARKER in text:
        return text
    node, lines = function_span(text, "_set_model_specific_special_tokens", cls="SpecialTokensMixin")
    body = node.body
    first = body[1] if len(body) > 1 and _is_docstring(body[0]) else body[0]
    if "special_tokens.keys()" not in "".join(lines[node.lineno - 1:node.end_lineno]):
        raise AnchorMissing("_set_model_specific_special_tokens no longer calls special_tokens.keys()")
    indent = " " * first.col_offset
    block = "".join(indent + line if line.strip() else line for line in L1_BLOCK.splitlines(keepends=True))
    at = first.lineno - 1
    return "".join(lines[:at]) + block + "".join(lines[at:])


def _is_docstring(stmt) -> bool:
    import ast
    return isinstance(stmt, ast.Expr) and isinstance(getattr(stmt, "value", None), ast.Constant) and isinstance(
        stmt.value.value, str)


# A fixed list of head sizes in the Triton backend would reject sizes vLLM 0.11.0 serves.
_L2_FIXED_LIST = re.compile(r"def get_supported_head_sizes\(.*?\):\s*\n\s*return \[", re.S)


def l2_triton_head_size_check(text: str) -> str:
    node, lines = function_span(text, "validate_head_size", cls="TritonAttentionBackend")
    source = "".join(lines[node.lineno - 1:node.end_lineno])
    if "head_size < 32" not in source or _L2_FIXED_LIST.search(text):
        raise AnchorMissing("TritonAttentionBackend.validate_head_size is not the `head_size < 32` check of "
                            "vLLM 0.11.0; decide L2 again for this vLLM")
    return text  # nothing to change: the check is the kernel's real limit


class LibraryPatch(NamedTuple):
    module: str
    transform: Callable[[str], str]


PATCHES: Dict[str, LibraryPatch] = {
    "L1": LibraryPatch("transformers.tokenization_utils_base", l1_special_tokens_list),
    "L2": LibraryPatch("vllm.v1.attention.backends.triton_attn", l2_triton_head_size_check),
}
