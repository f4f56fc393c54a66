"""MoE shim figures (make bench): the shim's vectorised core against transformers 4.57's
MixtralSparseMoeBlock on the same weights, and against a dense matmul of the same FLOPs.

moe_shim_speedup_vs_reference      tokens/s of the shim core / tokens/s of the reference block
moe_shim_fraction_of_dense_gemm    FLOP/s achieved by the shim core / FLOP/s of one dense matmul
"""

import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common" / "shims"))
from ixformer.contrib.vllm.layers import moe_forward  # noqa: E402

TOKENS, HIDDEN, INTER, EXPERTS, TOP_K, RUNS = 4096, 512, 1024, 8, 2, 7


def median_time(fn) -> float:
    fn()  # warm-up
    samples = []
    for _ in range(RUNS):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_local_experts=EXPERTS,
                           num_experts_per_tok=TOP_K)
    block = MixtralSparseMoeBlock(config).eval()
    w13 = torch.stack([torch.cat([e.w1.weight, e.w3.weight]) for e in block.experts]).contiguous()
    w2 = torch.stack([e.w2.weight for e in block.experts]).contiguous()
    x = torch.randn(TOKENS, HIDDEN)
    with torch.no_grad():
        logits = block.gate(x)
        t_ref = median_time(lambda: block(x.reshape(1, TOKENS, HIDDEN)))
        t_shim = median_time(lambda: moe_forward(x, logits, w13, w2, TOP_K))
        flops = TOKENS * TOP_K * 6 * HIDDEN * INTER
        a, b = torch.randn(TOKENS * TOP_K, HIDDEN), torch.randn(HIDDEN, 3 * INTER)
        t_dense = median_time(lambda: a @ b)  # 2*M*K*N = the same FLOPs
    print(f"moe_shim_speedup_vs_reference: {t_ref / t_shim:.2f}")
    print(f"moe_shim_fraction_of_dense_gemm: {(flops / t_shim) / (flops / t_dense):.2f}")
    print(f"moe_shim_gflops: {flops / t_shim / 1e9:.1f}")


if __name__ == "__main__":
    main()
