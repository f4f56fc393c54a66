"""R7 shim under CUDA graph capture: a check to run on a machine with a CUDA device.

vLLM captures its decode steps in CUDA graphs unless --enforce-eager. The shim's MoE must then take
its static path (no host synchronisation) during capture, and replaying the graph must give what
eager execution gives. For 1, 8 and 64 tokens, in bf16 and fp32, this script captures
`moe_forward` and a whole `mixtral_decoder_layer_forward` in a torch.cuda.CUDAGraph, replays them
with fresh inputs copied into the static input buffers, and compares each replay with eager calls
on the same inputs: the grouped path (what runs outside capture) and the static path. It prints
the max abs error per case and exits 1 on a mismatch or a failed capture.

    python scripts/gpu_check_r7.py

Needs torch with CUDA; the shim is imported from common/shims of this checkout. Without a CUDA
device it prints one line saying so and exits 0.
"""

import sys
import traceback
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common" / "shims"))
import ixformer.contrib.vllm.layers as layers  # noqa: E402

DEVICE, TOKENS = "cuda", (1, 8, 64)
HIDDEN, INTER, EXPERTS, TOP_K, REPLAYS = 1024, 2048, 8, 2, 3
# The grouped and static paths run the same math with different matmul shapes, so they differ by
# rounding only; bf16 as in the unit tests.
TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


class RMSNorm(torch.nn.Module):
    """vLLM's RMSNorm call shape: norm(x) or norm(x, residual) -> (norm(x + residual), x + residual)."""

    def forward(self, x, residual=None):
        s = x if residual is None else x + residual
        out = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)
        return out if residual is None else (out, s)


class Attention(torch.nn.Module):
    """Stands in for attention: any graph-safe token mixing will do here."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, positions, hidden_states):
        return self.proj(hidden_states) + positions.unsqueeze(-1).to(hidden_states.dtype) * 1e-3


class MoE(torch.nn.Module):
    """vLLM's layout: gate returns (logits, bias); experts hold w13_weight [E, 2I, H], w2_weight [E, H, I]."""

    def __init__(self, w13, w2):
        super().__init__()
        self.router = torch.nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.gate = lambda h: (self.router(h), None)
        self.experts = torch.nn.Module()
        self.experts.w13_weight, self.experts.w2_weight = w13, w2
        self.experts.top_k, self.experts.renormalize = TOP_K, True


class Layer(torch.nn.Module):
    def __init__(self, w13, w2):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()
        self.self_attn = Attention()
        self.block_sparse_moe = MoE(w13, w2)


def capture(fn: Callable[[], object]) -> Tuple[Callable[[], None], object]:
    """(replay, static outputs) of fn captured in a CUDA graph, warmed up as torch documents."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph.replay, out


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


def check(
    name: str,
    dtype: torch.dtype,
    tokens: int,
    inputs: Dict[str, torch.Tensor],
    fn: Callable[[], object],
    fresh: Callable[[], Dict[str, torch.Tensor]],
) -> bool:
    """Capture fn over the static `inputs`, replay with fresh values, compare with eager runs."""
    atol, rtol = TOL[dtype]
    taken = []
    decide = layers.static_moe_required
    layers.static_moe_required = lambda h: taken.append(decide(h)) or taken[-1]
    try:
        replay, out = capture(fn)
    except Exception:  # noqa: BLE001 - a failed capture is the finding this script exists for
        print(f"{name:>7} {str(dtype)[6:]:>8} {tokens:>3} tokens: CAPTURE FAILED")
        traceback.print_exc()
        return False
    finally:
        layers.static_moe_required = decide
    if True not in taken:
        print(f"{name:>7} {str(dtype)[6:]:>8} {tokens:>3} tokens: the static path was not taken during capture")
        return False
    outs = out if isinstance(out, tuple) else (out,)
    ok, worst = True, {"grouped": 0.0, "static": 0.0}
    for _ in range(REPLAYS):
        for key, value in fresh().items():
            inputs[key].copy_(value)
        replay()
        torch.cuda.synchronize()
        for path in ("grouped", "static"):
            force = path == "static"
            layers.static_moe_required = lambda h, force=force: force
            try:
                eager = fn()
            finally:
                layers.static_moe_required = decide
            for got, want in zip(outs, eager if isinstance(eager, tuple) else (eager,), strict=True):
                worst[path] = max(worst[path], max_err(got, want))
                ok = ok and torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)
    verdict = "ok" if ok else "MISMATCH"
    print(
        f"{name:>7} {str(dtype)[6:]:>8} {tokens:>3} tokens: max abs err vs eager grouped {worst['grouped']:.3g}, "
        f"vs eager static {worst['static']:.3g}  {verdict}"
    )
    return ok


def check_moe(dtype: torch.dtype, device: torch.device, tokens: int, w13: torch.Tensor, w2: torch.Tensor) -> bool:
    def fresh():
        return {
            "x": torch.randn(tokens, HIDDEN, device=device, dtype=dtype),
            "logits": torch.randn(tokens, EXPERTS, device=device, dtype=dtype),
        }

    s = fresh()
    return check("moe", dtype, tokens, s, lambda: layers.moe_forward(s["x"], s["logits"], w13, w2, TOP_K), fresh)


def check_layer(dtype: torch.dtype, device: torch.device, tokens: int, layer: Layer) -> bool:
    def fresh():
        return {
            "positions": torch.randint(0, 4096, (tokens,), device=device),
            "hidden": torch.randn(tokens, HIDDEN, device=device, dtype=dtype),
            "residual": torch.randn(tokens, HIDDEN, device=device, dtype=dtype),
        }

    s = fresh()
    return check(
        "layer", dtype, tokens, s, lambda: layers.mixtral_decoder_layer_forward(layer, s["positions"], s["hidden"], s["residual"]), fresh
    )


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_check_r7: no CUDA device on this machine; nothing checked")
        return 0
    torch.manual_seed(0)
    device = torch.device(DEVICE)
    ok = True
    with torch.no_grad():
        for dtype in (torch.bfloat16, torch.float32):
            w13 = (torch.randn(EXPERTS, 2 * INTER, HIDDEN, device=device) / HIDDEN**0.5).to(dtype)
            w2 = (torch.randn(EXPERTS, HIDDEN, INTER, device=device) / INTER**0.5).to(dtype)
            layer = Layer(w13, w2).to(device=device, dtype=dtype)
            for tokens in TOKENS:
                ok &= check_moe(dtype, device, tokens, w13, w2)
                ok &= check_layer(dtype, device, tokens, layer)
    print("gpu_check_r7: " + ("all cases match" if ok else "MISMATCH or failed capture (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
