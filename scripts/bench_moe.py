"""MoE shim figures (make bench): the shim's vectorised core against transformers 4.57's
MixtralSparseMoeBlock on the same weights, and against a dense matmul of the same FLOPs.

The shim has two paths: grouped (tokens grouped by expert; what runs normally) and static (every
expert over every token, taken only under CUDA graph capture). Both are timed in the same run, at
the prefill size (4096 tokens) and at a decode-like size (32 tokens). Each figure is the median
over rounds in which every timed function ran once, so a noisy shared CPU skews them less.

moe_shim_speedup_vs_reference             grouped path, prefill: tokens/s / tokens/s of the reference block
moe_shim_capture_path_vs_reference        static path, prefill: tokens/s / tokens/s of the reference block
moe_shim_decode_speedup_vs_reference      grouped path, decode-like size, same ratio
moe_shim_decode_capture_path_vs_reference static path, decode-like size, same ratio
moe_shim_fraction_of_dense_gemm           FLOP/s achieved by the grouped path / FLOP/s of one dense matmul
backport_moe_fraction_of_dense_gemm       the same for the CPU path R11 gives an engine's FusedMoE (what the
                                          Qwen3-MoE backport's experts run on a CPU build; goal >= 0.9)
backport_moe_vs_every_expert              that path / every expert over every token with a dense routing
                                          matrix (what the backport ran before it was built on FusedMoE)
gemma4_moe_fraction_of_dense_gemm         the same for the Gemma 4 backport's tanh-GELU experts
                                          (gated_experts.py: the grouped path under Gemma 4's activation,
                                          which the engine's FusedMoE lacks), routed as Gemma 4's router
"""

import statistics
import sys
from types import SimpleNamespace
import time
from pathlib import Path

import torch
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common" / "shims"))
from ixformer.contrib.vllm.layers import experts_grouped, moe_forward, moe_forward_static  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common" / "vllm_plugin"))
from compat_patches.cpu_moe import forward_cpu  # noqa: E402

TOKENS, DECODE_TOKENS, HIDDEN, INTER, EXPERTS, TOP_K, RUNS = 4096, 32, 512, 1024, 8, 2, 7
MIN_SAMPLE_S = 0.02


def rounds(fns: list) -> list:
    """RUNS rounds of seconds per call, one entry per function in each round.

    The functions alternate within a round, so load from elsewhere on a shared machine falls on
    all of them alike and the per-round ratios stay meaningful. A sample batches enough calls to
    last MIN_SAMPLE_S: a decode-size call takes well under a millisecond.
    """
    repeats = []
    for fn in fns:
        start = time.perf_counter()
        fn()  # warm-up, and the call count per sample
        repeats.append(max(1, int(MIN_SAMPLE_S / max(time.perf_counter() - start, 1e-9))))
    samples = []
    for _ in range(RUNS):
        row = []
        for fn, repeat in zip(fns, repeats, strict=True):
            start = time.perf_counter()
            for _ in range(repeat):
                fn()
            row.append((time.perf_counter() - start) / repeat)
        samples.append(row)
    return samples


def median_of(samples: list, figure) -> float:
    return statistics.median(figure(*row) for row in samples)


def gemma4_fraction(x, logits, w13, w2, a, b) -> float:
    """Dense matmul time / the Gemma 4 experts' time on the same tokens, experts and FLOPs."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, TOP_K, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")  # noqa: E731
    with torch.no_grad():
        samples = rounds([lambda: a @ b, lambda: experts_grouped(x, weights, experts, w13, w2, gelu)])
    return median_of(samples, lambda dense, gemma4: dense / gemma4)


def main() -> None:
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_local_experts=EXPERTS, num_experts_per_tok=TOP_K)
    block = MixtralSparseMoeBlock(config).eval()
    w13 = torch.stack([torch.cat([e.w1.weight, e.w3.weight]) for e in block.experts]).contiguous()
    w2 = torch.stack([e.w2.weight for e in block.experts]).contiguous()
    flops = TOKENS * TOP_K * 6 * HIDDEN * INTER
    a, b = torch.randn(TOKENS * TOP_K, HIDDEN), torch.randn(HIDDEN, 3 * INTER)  # 2*M*K*N = the same FLOPs
    with torch.no_grad():
        x, d = torch.randn(TOKENS, HIDDEN), torch.randn(DECODE_TOKENS, HIDDEN)
        logits, d_logits = block.gate(x), block.gate(d)
        layer = SimpleNamespace(w13_weight=w13, w2_weight=w2)
        prefill = rounds(
            [
                lambda: block(x.reshape(1, TOKENS, HIDDEN)),
                lambda: moe_forward(x, logits, w13, w2, TOP_K),
                lambda: moe_forward_static(x, logits, w13, w2, TOP_K),
                lambda: a @ b,
                lambda: forward_cpu(None, layer, x, False, TOP_K, logits, True),
            ]
        )
        decode = rounds(
            [
                lambda: block(d.reshape(1, DECODE_TOKENS, HIDDEN)),
                lambda: moe_forward(d, d_logits, w13, w2, TOP_K),
                lambda: moe_forward_static(d, d_logits, w13, w2, TOP_K),
            ]
        )
    print(f"moe_shim_speedup_vs_reference: {median_of(prefill, lambda ref, shim, static, dense, backport: ref / shim):.2f}")
    print(f"moe_shim_capture_path_vs_reference: {median_of(prefill, lambda ref, shim, static, dense, backport: ref / static):.2f}")
    print(f"moe_shim_decode_speedup_vs_reference: {median_of(decode, lambda ref, shim, static: ref / shim):.2f}  ({DECODE_TOKENS} tokens)")
    print(
        f"moe_shim_decode_capture_path_vs_reference: {median_of(decode, lambda ref, shim, static: ref / static):.2f}"
        f"  ({DECODE_TOKENS} tokens)"
    )
    print(f"moe_shim_fraction_of_dense_gemm: {median_of(prefill, lambda ref, shim, static, dense, backport: dense / shim):.2f}")
    print(f"moe_shim_gflops: {flops / median_of(prefill, lambda ref, shim, static, dense, backport: shim) / 1e9:.1f}")
    print(f"backport_moe_fraction_of_dense_gemm: {median_of(prefill, lambda ref, shim, static, dense, backport: dense / backport):.2f}")
    print(f"gemma4_moe_fraction_of_dense_gemm: {gemma4_fraction(x, logits, w13, w2, a, b):.2f}")
    print(f"backport_moe_vs_every_expert: {median_of(prefill, lambda ref, shim, static, dense, backport: static / backport):.2f}")


if __name__ == "__main__":
    main()
