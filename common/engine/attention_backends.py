"""Head sizes the attention backends of upstream vLLM 0.11.0 accept when a user forces one with
VLLM_ATTENTION_BACKEND (their validate_head_size / get_supported_head_sizes). Data only; H1 reads it.
With no backend forced, vLLM picks one that fits by itself (FLEX_ATTENTION takes any size)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, Optional, Tuple

# backend -> ("sizes", allowed) | ("min", smallest) | ("any", None)
FORCED_BACKENDS: Dict[str, Tuple[str, Optional[object]]] = {
    "FLASH_ATTN": ("sizes", (32, 64, 96, 128, 160, 192, 224, 256)),
    "TRITON_ATTN": ("min", 32),
    "FLASHINFER": ("sizes", (64, 128, 256)),
    "FLEX_ATTENTION": ("any", None),
    "TORCH_SDPA": ("any", None),
}


def forced_backend_accepts(backend: str, head_size: int) -> Optional[bool]:
    """Whether `backend` takes `head_size`; None for a backend this table does not know."""
    rule = FORCED_BACKENDS.get(backend.upper())
    if rule is None:
        return None
    kind, value = rule
    if kind == "sizes":
        return head_size in value  # type: ignore[operator]
    if kind == "min":
        return head_size >= value  # type: ignore[operator]
    return True
