"""gelu_tanh_and_mul for ixformer builds that lack it (L3): the vendor's vLLM fork calls it for
GeLU-gated MLPs (Gemma and friends). Same contract as vLLM's `_C.gelu_tanh_and_mul(out, x)`:
`out = gelu(x[..., :d], approximate="tanh") * x[..., d:]` with d = x.shape[-1] // 2.
"""

import torch
import torch.nn.functional as F

__all__ = ["gelu_tanh_and_mul"]


def gelu_tanh_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    if x.shape[-1] != 2 * d or out.shape != x.shape[:-1] + (d,):
        raise ValueError(
            f"gelu_tanh_and_mul: input {tuple(x.shape)} needs an even last dimension and out "
            f"{tuple(x.shape[:-1]) + (d,)}, got out {tuple(out.shape)}"
        )
    torch.mul(F.gelu(x[..., :d], approximate="tanh"), x[..., d:], out=out)
    return out
