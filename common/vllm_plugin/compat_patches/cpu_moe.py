"""R11's experts for an engine's CPU build whose FusedMoE has no CPU path (vLLM 0.5.5: "The CPU
backend currently does not support MoE", on the first request of every Mixtral, Qwen2-MoE or
DeepSeek-V2).

When COMPAT_CPU_MOE=grouped, the plugin (compat_plugin.py) gives the engine's
UnquantizedFusedMoEMethod a `forward_cpu`: the engine's own routing (softmax top-k, or
DeepSeek's grouped top-k, which the engine writes in plain torch), then the experts grouped by
token, each over its own tokens only: the R7 shim's core (shims/ixformer/contrib/vllm/layers.py),
read from that file so there is one implementation. The layer's weights are the engine's fused
ones (w13 [experts, 2 x intermediate, hidden], w2 [experts, hidden, intermediate]) as its loader
filled them. Only a CPU build calls forward_cpu: on the card the vendor's kernel runs.
"""

from __future__ import annotations

import importlib.util
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

ENV = "COMPAT_CPU_MOE"
MODES = ("grouped",)
# Where vLLM 0.5.x keeps the method whose CPU path is missing.
METHOD = ("vllm.model_executor.layers.fused_moe.layer", "UnquantizedFusedMoEMethod")
# common/shims/..., from common/vllm_plugin/compat_patches/cpu_moe.py.
SHIM = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "shims", "ixformer", "contrib", "vllm", "layers.py"
)
_SHIM: dict = {}


def grouped_core() -> Any:
    """The R7 shim's module, whose `experts_grouped` runs routed experts grouped by token (also
    the Gemma 4 backport's tanh-GELU experts: one implementation of the grouped path)."""
    if "module" not in _SHIM:
        spec = importlib.util.spec_from_file_location("_compat_moe_experts", SHIM)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _SHIM["module"] = module
    return _SHIM["module"]


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
