"""R11's experts for an engine's CPU build whose FusedMoE has no CPU path (vLLM 0.5.5: "The CPU
backend currently does not support MoE", on the first request of every Mixtral, Qwen2-MoE or
DeepSeek-V2).

When COMPAT_CPU_MOE=grouped, the plugin (compat_plugin.py) gives the engine's
UnquantizedFusedMoEMethod a `forward_cpu`: the engine's own routing (softmax top-k, or
DeepSeek's grouped top-k, which the engine writes in plain torch), then the experts grouped by
token, each over its own tokens only: the core the R7 shim runs (shims/compat_grouped_experts.py),
so there is one implementation. The layer's weights are the engine's fused
ones (w13 [experts, 2 x intermediate, hidden], w2 [experts, hidden, intermediate]) as its loader
filled them. Only a CPU build calls forward_cpu: on the card the vendor's kernel runs.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

ENV = "COMPAT_CPU_MOE"
MODES = ("grouped",)
# Where vLLM 0.5.x keeps the method whose CPU path is missing.
METHOD = ("vllm.model_executor.layers.fused_moe.layer", "UnquantizedFusedMoEMethod")
# The runtime package's root (common/ is in it), from common/vllm_plugin/compat_patches/cpu_moe.py.
RUNTIME_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def grouped_core() -> Any:
    """The grouped experts' core, common/shims/compat_grouped_experts.py, whose `experts_grouped`
    runs routed experts grouped by token (also the Gemma 4 backport's tanh-GELU experts): the R7
    shim runs the same module. The runtime package's root goes last on sys.path, so that none of
    the engine's own packages is shadowed (the shim directory itself would make `ixformer`
    importable, which the engine reads as the vendor's library being there)."""
    if RUNTIME_ROOT not in sys.path:
        sys.path.append(RUNTIME_ROOT)
    try:
        from common.shims import compat_grouped_experts
    except ImportError as exc:  # a top-level `common` of the engine's image found first
        found = getattr(sys.modules.get("common"), "__file__", None)
        raise ImportError(
            f"the compat runtime's package is {RUNTIME_ROOT}/common, but this Python imports `common` from {found}: {exc}"
        ) from exc
    return compat_grouped_experts


def forward_cpu(
    self: Any,
    layer: Any,
    x: Any,
    use_grouped_topk: bool,
    top_k: int,
    router_logits: Any,
    renormalize: bool,
    topk_group: Optional[int] = None,
    num_expert_group: Optional[int] = None,
) -> Any:
    shim = grouped_core()
    if use_grouped_topk:
        from vllm.model_executor.layers.fused_moe.fused_moe import grouped_topk

        weights, experts = grouped_topk(x, router_logits, top_k, renormalize, num_expert_group, topk_group)
    else:
        weights, experts = shim._route(router_logits, x.shape[0], layer.w13_weight.shape[0], top_k, renormalize, x.dtype)
    return shim.experts_grouped(x, weights, experts, layer.w13_weight, layer.w2_weight)


def install(log: Any) -> bool:
    """Give the engine's FusedMoE method the CPU path; False when this vLLM has no such method."""
    import importlib

    module, name = METHOD
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        log.warning("compat_weights: %s=grouped, but this vLLM has no %s.%s; its MoE runs as it is", ENV, module, name)
        return False
    cls.forward_cpu = forward_cpu
    log.info("compat_weights: %s.forward_cpu runs the experts grouped by token (%s=grouped)", name, ENV)
    return True
