"""R7 shim numerics: the vectorised MoE core equals transformers 4.57's MixtralSparseMoeBlock.

Tolerances: fp32 atol 1e-5 / rtol 1e-4 (summation order differs); bf16 atol 2e-2 / rtol 2e-2
(both sides round every matmul to bf16, in different orders).
"""

import sys
from pathlib import Path

import pytest
import torch
from transformers import MixtralConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shims"))
from ixformer.contrib.vllm.layers import ShimError, mixtral_decoder_layer_forward, moe_forward, sparse_moe  # noqa: E402

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def reference_block(top_k: int, experts: int = 8, hidden: int = 64, inter: int = 96, dtype=torch.float32):
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=experts,
                           num_experts_per_tok=top_k)
    block = MixtralSparseMoeBlock(config).eval().to(dtype)
    w13 = torch.stack([torch.cat([e.w1.weight, e.w3.weight]) for e in block.experts])
    w2 = torch.stack([e.w2.weight for e in block.experts])
    return block, w13, w2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("tokens", [1, 4096])
@pytest.mark.parametrize("three_d", [False, True])
def test_core_equals_transformers_block(dtype, top_k, tokens, three_d):
    block, w13, w2 = reference_block(top_k, dtype=dtype)
    x = torch.randn(tokens, 64, dtype=dtype)
    with torch.no_grad():
        want, _ = block(x.reshape(1, tokens, 64))
        logits = block.gate(x)
        got = moe_forward(x.reshape(1, tokens, 64) if three_d else x, logits, w13, w2, top_k)
    assert got.shape == ((1, tokens, 64) if three_d else (tokens, 64))
    torch.testing.assert_close(got.reshape(tokens, 64), want.reshape(tokens, 64), **TOL[dtype])


def test_experts_that_receive_no_token():
    block, w13, w2 = reference_block(top_k=2, experts=8)
    x = torch.randn(16, 64)
    with torch.no_grad():
        logits = block.gate(x)
        logits[:, 4:] = -1e4  # experts 4..7 never chosen
        got = moe_forward(x, logits, w13, w2, 2)
        # The reference routes on the same logits: monkeypatched gate.
        block.gate.forward = lambda h: logits
        want, _ = block(x.reshape(1, 16, 64))
    torch.testing.assert_close(got, want.reshape(16, 64), **TOL[torch.float32])


def test_without_renormalisation_matches_dense_computation():
    _, w13, w2 = reference_block(top_k=2)
    x, logits = torch.randn(32, 64), torch.randn(32, 8)
    probs = torch.softmax(logits, dim=-1)
    top = torch.topk(probs, 2, dim=-1)
    mask = torch.zeros_like(probs).scatter(1, top.indices, top.values)
    dense = sum(mask[:, e:e + 1] * (torch.nn.functional.silu(x @ w13[e, :96].t()) * (x @ w13[e, 96:].t())) @ w2[e].t()
                for e in range(8))
    torch.testing.assert_close(moe_forward(x, logits, w13, w2, 2, renormalize=False), dense, **TOL[torch.float32])


class FusedExperts(torch.nn.Module):
    """vLLM's FusedMoE layout: w13_weight [E, 2I, H], w2_weight [E, H, I]."""

    def __init__(self, w13, w2, top_k):
        super().__init__()
        self.w13_weight, self.w2_weight, self.top_k, self.renormalize = w13, w2, top_k, True


class VllmLikeMoE(torch.nn.Module):
    def __init__(self, block, w13, w2, top_k):
        super().__init__()
        self.gate = lambda h: (block.gate(h), None)  # vLLM's ReplicatedLinear returns (out, bias)
        self.experts = FusedExperts(w13, w2, top_k)


class FusedRMSNorm(torch.nn.Module):
    """vLLM's RMSNorm: norm(x) or norm(x, residual) -> (norm(x + residual), x + residual)."""

    def forward(self, x, residual=None):
        if residual is None:
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        s = x + residual
        return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6), s


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(64, 64)

    def forward(self, positions, hidden_states, kv_cache=None, attn_metadata=None):
        assert kv_cache is None or kv_cache == "cache"
        return self.proj(hidden_states) + positions.unsqueeze(-1)


class Layer(torch.nn.Module):
    def __init__(self, block, w13, w2, top_k):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = FusedRMSNorm(), FusedRMSNorm()
        self.self_attn = Attention()
        self.block_sparse_moe = VllmLikeMoE(block, w13, w2, top_k)
        self.ref_block = block

    def upstream_forward(self, positions, hidden_states, residual):
        """Upstream vLLM MixtralDecoderLayer.forward, with transformers' block as the MoE."""
        if residual is None:
            residual, hidden_states = hidden_states, self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states = self.self_attn(positions=positions, hidden_states=hidden_states)
        hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
        out, _ = self.ref_block(hidden_states.reshape(1, -1, 64))
        return out.reshape(hidden_states.shape), residual


@pytest.mark.parametrize("style", ["upstream", "kv-cache-era", "keywords"])
@pytest.mark.parametrize("first_layer", [True, False])
def test_decoder_layer_forward_equals_upstream(style, first_layer):
    block, w13, w2 = reference_block(top_k=2)
    layer = Layer(block, w13, w2, 2)
    positions, x = torch.arange(10).float(), torch.randn(10, 64)
    residual = None if first_layer else torch.randn(10, 64)
    with torch.no_grad():
        want = layer.upstream_forward(positions, x, residual)
        if style == "upstream":
            got = mixtral_decoder_layer_forward(layer, positions, x, residual)
        elif style == "kv-cache-era":
            got = mixtral_decoder_layer_forward(layer, positions, x, "cache", object(), residual)
        else:
            got = mixtral_decoder_layer_forward(layer, positions=positions, hidden_states=x, residual=residual)
    torch.testing.assert_close(got[0], want[0], **TOL[torch.float32])
    torch.testing.assert_close(got[1], want[1], **TOL[torch.float32])


def test_block_without_reachable_weights_is_called_as_is():
    block, _, _ = reference_block(top_k=2)
    calls = []
    opaque = lambda h: calls.append(h.shape) or h * 2  # noqa: E731
    x = torch.randn(3, 64)
    torch.testing.assert_close(sparse_moe(opaque, x), x * 2)
    assert calls == [(3, 64)]


@pytest.mark.parametrize("args, kwargs, needle", [
    ((1, 2, 3, 4, 5, 6, 7), {}, "got 7 positional arguments"),
    ((), {"hidden_states": 1}, "missing=['positions']"),
    ((1, 2), {"cache": 3}, "unknown=['cache']"),
    ((1, 2), {"positions": 1}, "got 'positions' twice"),
])
def test_uninterpretable_calls_name_the_shim(args, kwargs, needle):
    block, w13, w2 = reference_block(top_k=2)
    with pytest.raises(ShimError) as err:
        mixtral_decoder_layer_forward(Layer(block, w13, w2, 2), *args, **kwargs)
    assert "enginex-compat shim ixformer.contrib.vllm.layers" in str(err.value) and needle in str(err.value)
