"""The engine patches of the plugin: what each changes inside vLLM, why, on which engines, and when
it can go (the ledger, in the manner of vllm-ascend's patch/__init__.py).

A patch is installed by the plugin (compat_plugin.register) only where a repair or a backport asks
for it, replaces one engine method or class, and leaves every other model on the engine's own code.
Each module's `install` says so in one log line and returns False, changing nothing, where the
engine lacks what it patches. On the cards the vendors' builds run their own kernels: these patches
make the CPU builds the tests run compute what the card computes.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Tuple


class Patch:
    """One entry of the ledger."""

    __slots__ = ("module", "patches", "why", "engines", "until")

    def __init__(self, module: str, patches: str, why: str, engines: str, until: str) -> None:
        self.module, self.patches, self.why, self.engines, self.until = module, patches, why, engines, until


LEDGER: Tuple[Patch, ...] = (
    Patch(
        "cpu_moe",
        "vllm.model_executor.layers.fused_moe.layer.UnquantizedFusedMoEMethod.forward_cpu (added)",
        'the CPU build\'s FusedMoE has no CPU path ("The CPU backend currently does not support MoE"): R11 gives it the '
        "R7 shim's grouped experts; the Gemma 4 backport's tanh-GELU experts run the same core",
        "vLLM 0.5.x CPU builds, when COMPAT_CPU_MOE=grouped (R11)",
        "the BI-100 generation moves to an engine whose CPU build runs FusedMoE (vLLM 0.11.0's does)",
    ),
    Patch(
        "cpu_windows",
        "vllm.attention.backends.torch_sdpa.TorchSDPABackendImpl (its constructor and forward, for windowed or soft-capped layers only)",
        "torch_sdpa builds one prefill mask for all layers from the first layer's window, reads every decode's whole "
        "context, and refuses a soft cap: the per-layer windows of the window backports and Gemma 2's soft cap",
        "vLLM 0.5.x CPU builds, when a backport with windows=True is registered",
        "the window backports and Gemma 2's leave (the generation moves to an engine serving those windows itself)",
    ),
    Patch(
        "cpu_requests",
        "vllm.worker.cpu_model_runner.CPUModelRunner (its model input and execute_model)",
        "the CPU runner hands a model with recurrent state neither its requests nor the finished ones, which the GPU "
        "runner does (Jamba's protocol): Qwen3.5's Gated DeltaNet state per sequence",
        "vLLM 0.5.x CPU builds, when a backport keeping its states in a pool of its own (recurrent=OWN_POOL) is registered",
        "the Qwen3.5 backport leaves (an engine with Qwen3.5 of its own)",
    ),
)
