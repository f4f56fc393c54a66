"""H1: the model's attention head size is outside what the card's attention kernels take.

Each card's engine handles an unusual head size differently, so the repair follows the card's
`head_size_policy`. Upstream vLLM 0.11.0 (nv-a100, `flex-fallback`) falls back to FLEX_ATTENTION
by itself unless VLLM_ATTENTION_BACKEND forces a backend; only that forced case can fail, and the
user's choice is theirs to change, so it is a finding (the silent fallback is an `info` finding:
FLEX_ATTENTION is slower). Hygon's fork (`flash-attn-pa-env`) routes
decode through its FlashAttention paged kernel unless VLLM_USE_FLASH_ATTN_PA=0, which the repair
sets for sizes outside that kernel's list. The BI-100 fork (`paged-attn-patch`) rejects sizes
missing from PagedAttention.get_supported_head_sizes although ixformer's kernel takes them: the
repair adds the size to that list at start (sorted insert, backup kept, idempotent, only when the
function is the plain list it expects). An unknown head size changes nothing.
"""

from __future__ import annotations

from ..engine.attention_backends import forced_backend_accepts
from ..model.headsize import detect_head_size
from ..plan import Repair
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Callable

PAGED_ATTN_MODULE = "vllm.attention.ops.paged_attn"


def add_paged_attn_head_size(size: int) -> Callable[[str], str]:
    """A transform for common.engine.patching: `size` into PagedAttention.get_supported_head_sizes."""

    def transform(text: str) -> str:
        import ast

        from ..engine.patching import AnchorMissing, function_span, is_docstring  # only a start that patches pays for it

        node, lines = function_span(text, "get_supported_head_sizes", cls="PagedAttention")
        body = [s for s in node.body if not is_docstring(s)]
        ret = body[0] if len(body) == 1 else None
        if not (
            isinstance(ret, ast.Return)
            and isinstance(ret.value, ast.List)
            and ret.value.elts
            and all(isinstance(e, ast.Constant) and type(e.value) is int for e in ret.value.elts)
        ):
            raise AnchorMissing("PagedAttention.get_supported_head_sizes is not `return [<ints>]`")
        sizes = [e.value for e in ret.value.elts]
        if size in sizes:
            return text
        lst = ret.value
        if lst.lineno != lst.end_lineno:
            raise AnchorMissing("PagedAttention.get_supported_head_sizes spans lines; not the expected literal")
        line = lines[lst.lineno - 1]
        raw = line.encode("utf-8")
        new = raw[: lst.col_offset] + repr(sorted(sizes + [size])).encode() + raw[lst.end_col_offset :]
        lines[lst.lineno - 1] = new.decode("utf-8")
        return "".join(lines)

    return transform


class HeadSize(Rule):
    code = "H1"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        if not config:
            return outcome  # no config: the model dir findings already say so
        head = detect_head_size(dict(config, **ctx.config_edits))
        size = head.value
        if size is None:
            outcome.findings.append(self.finding("warning", f"head size unknown ({head.problem}); the card's kernels cannot be checked"))
            return outcome
        profile = ctx.profile
        own = sorted({s for s, _ in ctx.layer_heads})
        if own and profile.head_sizes:
            # Layers attending at sizes of their own (R10 says which): the widest the kernels lack
            # is the one judged; the others are served as the config's one would be.
            outside = [s for s in own if s not in profile.head_sizes]
            if outside:
                size = max(outside)
                head.source = f"a layer's own, of {own}"
        backend = ctx.env.get("VLLM_ATTENTION_BACKEND", "").strip()
        if profile.head_size_policy == "flex-fallback":
            if backend and forced_backend_accepts(backend, size) is False:
                outcome.findings.append(
                    self.finding(
                        "error",
                        f"VLLM_ATTENTION_BACKEND={backend} rejects head size {size}; unset it "
                        "(vLLM then falls back to FLEX_ATTENTION) or set FLEX_ATTENTION",
                    )
                )
            elif not backend and profile.head_sizes and size not in profile.head_sizes:
                # It starts and serves right, only slower: worth knowing before a benchmark run.
                sizes = ", ".join(str(s) for s in profile.head_sizes)
                outcome.findings.append(
                    self.finding(
                        "info",
                        f"head size {size} ({head.source}) is outside FlashAttention's {{{sizes}}}; vLLM serves it "
                        "with its FLEX_ATTENTION fallback, which is slower",
                    )
                )
            return outcome
        if size in profile.head_sizes:
            return outcome
        sizes = ", ".join(str(s) for s in profile.head_sizes)
        if profile.head_size_policy == "flash-attn-pa-env":
            outcome.repairs.append(
                Repair(
                    self.code,
                    self.title,
                    f"head size {size} ({head.source}) is outside the FlashAttention paged kernel's {{{sizes}}}; "
                    "decode uses the generic paged attention",
                    env={"VLLM_USE_FLASH_ATTN_PA": "0"},
                )
            )
        elif profile.head_size_policy == "paged-attn-patch":
            repair = Repair(
                self.code,
                self.title,
                f"head size {size} ({head.source}) added to PagedAttention.get_supported_head_sizes (was {{{sizes}}})",
            )
            repair.engine_patch = (PAGED_ATTN_MODULE, add_paged_attn_head_size(size))
            outcome.repairs.append(repair)
        return outcome


RULE = HeadSize()
