"""L2, a build check: vLLM's Triton attention backend must reject only head sizes below 32
(why: `python3 -m common explain L2`).

Decided from vLLM 0.11.0's real `vllm/v1/attention/backends/triton_attn.py`; the check changes
nothing and fails the image build when the image's vLLM brings back a fixed head-size list the
preflight cannot see (tests/test_library_patches.py holds the evidence on the real file).
"""

from __future__ import annotations

import re

from common.engine.patching import AnchorMissing, function_span

MODULE = "vllm.v1.attention.backends.triton_attn"
# A fixed list of head sizes in the Triton backend would reject sizes vLLM 0.11.0 serves.
_FIXED_LIST = re.compile(r"def get_supported_head_sizes\(.*?\):\s*\n\s*return \[", re.S)


def transform(text: str) -> str:
    node, lines = function_span(text, "validate_head_size", cls="TritonAttentionBackend")
    source = "".join(lines[node.lineno - 1 : node.end_lineno])
    if "head_size < 32" not in source or _FIXED_LIST.search(text):
        raise AnchorMissing(
            "TritonAttentionBackend.validate_head_size is not the `head_size < 32` check of vLLM 0.11.0; decide L2 again for this vLLM"
        )
    return text  # nothing to change: the check is the kernel's real limit
