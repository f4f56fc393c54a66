"""Routed experts with an activation the engine's FusedMoE cannot compute, in plain torch.

vLLM 0.5.5's FusedMoE (and the vendor kernels behind it on the card) computes SiLU-gated experts
only, 0.11's SiLU or the exact GELU; Gemma 4's are tanh-GELU-gated. `GatedExperts` holds the experts as transformers 5 stores them
(`experts.gate_up_proj` [experts, 2 x intermediate, hidden], each expert's gate rows then its up
rows; `experts.down_proj` [experts, hidden, intermediate]), each rank the slice of the intermediate
size tensor parallelism gives it, and runs them with the R7 shim's grouped path (tokens grouped by
expert, each expert's two matmuls over its own tokens only: the dense-GEMM limit on a CPU, one
implementation with R11's CPU path) under the family's activation, and with its static path while
a CUDA graph is captured (the grouped path reads the experts' token counts on the host, which a
capture refuses: the V1 engine captures full decode graphs of any model unless it is eager); the
ranks' partial sums are all-reduced as the engine's RowParallelLinear does. Its layers take the
same arguments on vLLM 0.5.5 and 0.11: the Gemma 4 backports of both use it.
"""

from typing import Callable

import torch
from torch import nn
from vllm.distributed import get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size, tensor_model_parallel_all_reduce

try:  # as common.vllm_plugin.compat_backports (doctor's model build)
    from ...compat_patches import cpu_moe
except ImportError:  # as top-level compat_backports (the plugin directory on the engine's path)
    from compat_patches import cpu_moe  # type: ignore[no-redef]


class GatedExperts(nn.Module):
    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int, act: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        ranks = get_tensor_model_parallel_world_size()
        if intermediate_size % ranks:
            raise ValueError(f"experts of intermediate size {intermediate_size} do not split over {ranks} tensor-parallel ranks")
        self.rank, self.ranks, self.shard, self.act = get_tensor_model_parallel_rank(), ranks, intermediate_size // ranks, act
        dtype = torch.get_default_dtype()
        # Named as the checkpoint names them, so the dense loader finds them and calls their loaders.
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * self.shard, hidden_size, dtype=dtype), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(num_experts, hidden_size, self.shard, dtype=dtype), requires_grad=False)
        self.gate_up_proj.weight_loader = self._load_gate_up
        self.down_proj.weight_loader = self._load_down

    def _cut(self, loaded: torch.Tensor, dim: int) -> torch.Tensor:
        return loaded.narrow(dim, self.rank * self.shard, self.shard)

    @staticmethod
    def _check(loaded: torch.Tensor, full: tuple) -> None:
        if tuple(loaded.shape) != full:
            # Loading it anyway would put wrong numbers in the experts: stop the start with the reason.
            raise ValueError(f"expert tensor of shape {list(loaded.shape)}, expected {list(full)} (transformers 5's stacked experts)")

    def _load_gate_up(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        experts, rows, hidden = param.shape
        self._check(loaded, (experts, rows * self.ranks, hidden))
        gate, up = loaded.chunk(2, dim=1)
        param.data.copy_(torch.cat((self._cut(gate, 1), self._cut(up, 1)), dim=1))

    def _load_down(self, param: nn.Parameter, loaded: torch.Tensor) -> None:
        experts, hidden, columns = param.shape
        self._check(loaded, (experts, hidden, columns * self.ranks))
        param.data.copy_(self._cut(loaded, 2))

    def forward(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """x [tokens, hidden]; each token's top-k `experts` and their `weights` (float32, as the
        author's router leaves them)."""
        core = cpu_moe.grouped_core()
        out = core.experts_routed(x, weights, experts, self.gate_up_proj, self.down_proj, self.act)
        return tensor_model_parallel_all_reduce(out) if self.ranks > 1 else out
