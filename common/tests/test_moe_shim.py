"""R7 shim numerics: the vectorised MoE core equals transformers 4.57's MixtralSparseMoeBlock.

Both MoE paths are checked: the grouped one (normal use) and the static one taken under CUDA graph
capture, which must also never synchronise with the host. That is checked on the CPU by running it
under NoHostSync, a dispatch mode that refuses every op a CUDA graph capture would refuse or
could not replay (host reads, data-dependent output shapes, cross-device copies).

Tolerances: fp32 atol 1e-5 / rtol 1e-4 (summation order differs); bf16 atol 2e-2 / rtol 2e-2
(both sides round every matmul to bf16, in different orders).
"""

import sys
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import MixtralConfig, Qwen3MoeConfig
from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "common" / "shims"))
import ixformer.contrib.vllm.layers as layers  # noqa: E402
from ixformer.contrib.vllm.layers import (  # noqa: E402
    ShimError,
    mixtral_decoder_layer_forward,
    moe_forward,
    moe_forward_grouped,
    moe_forward_static,
    sparse_moe,
    static_moe_required,
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def reference_block(top_k: int, experts: int = 8, hidden: int = 64, inter: int = 96, dtype=torch.float32):
    torch.manual_seed(0)
    config = MixtralConfig(hidden_size=hidden, intermediate_size=inter, num_local_experts=experts, num_experts_per_tok=top_k)
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
    dense = sum(mask[:, e : e + 1] * (torch.nn.functional.silu(x @ w13[e, :96].t()) * (x @ w13[e, 96:].t())) @ w2[e].t() for e in range(8))
    torch.testing.assert_close(moe_forward(x, logits, w13, w2, 2, renormalize=False), dense, **TOL[torch.float32])


def test_the_grouped_core_gates_with_the_activation_it_is_given():
    """Gemma 4's experts (compat_backports/layers/gated_experts.py) run the core under tanh-GELU: each
    token's experts as a per-token loop computes them, with weights that do not sum to one (its
    router scales each picked expert), and not what SiLU gives."""
    _, w13, w2 = reference_block(top_k=2)
    x = torch.randn(32, 64)
    experts = torch.stack([torch.randperm(8)[:2] for _ in range(32)])
    weights = torch.rand(32, 2) * 2
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")  # noqa: E731
    want = torch.stack(
        [
            sum(
                w * (gelu(x[t] @ w13[e, :96].t()) * (x[t] @ w13[e, 96:].t())) @ w2[e].t()
                for w, e in zip(weights[t], experts[t].tolist(), strict=True)
            )
            for t in range(32)
        ]
    )
    got = layers.experts_grouped(x, weights, experts, w13, w2, gelu)
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert not torch.allclose(layers.experts_grouped(x, weights, experts, w13, w2), want, atol=1e-3)


def test_gemma4s_experts_under_capture_take_the_static_path_with_their_activation():
    """The V1 engine captures full decode graphs of any model (vLLM 0.11 wraps it unless eager):
    Gemma 4's gated experts then take the static path, which gives the grouped path's result with
    the same activation and never reads the host."""
    _, w13, w2 = reference_block(top_k=2)
    x = torch.randn(16, 64)
    experts = torch.stack([torch.randperm(8)[:2] for _ in range(16)])
    weights = torch.rand(16, 2) * 2
    gelu = lambda t: torch.nn.functional.gelu(t, approximate="tanh")  # noqa: E731
    want = layers.experts_grouped(x, weights, experts, w13, w2, gelu)
    with torch.no_grad(), NoHostSync():
        got = layers.experts_static(x, weights, experts, w13, w2, gelu)
    torch.testing.assert_close(got, want, **TOL[torch.float32])
    assert layers.experts_routed(x, weights, experts, w13, w2, gelu) is not None  # a CPU tensor: the grouped path
    with torch.no_grad(), mock.patch.object(layers.core, "static_moe_required", return_value=True), NoHostSync():
        routed = layers.experts_routed(x, weights, experts, w13, w2, gelu)
    torch.testing.assert_close(routed, want, **TOL[torch.float32])


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
@pytest.mark.parametrize("path", ["grouped", "static"])
def test_decoder_layer_forward_equals_upstream(style, first_layer, path, monkeypatch):
    taken = force_path(monkeypatch, path)
    block, w13, w2 = reference_block(top_k=2)
    layer = Layer(block, w13, w2, 2)
    positions, x = torch.arange(10).float(), torch.randn(10, 64)
    residual = None if first_layer else torch.randn(10, 64)
    with torch.no_grad():
        want = layer.upstream_forward(positions, x, residual)
        # With capture forced, the whole layer must run as a graph capture would allow.
        with NoHostSync() if path == "static" else nullcontext():
            if style == "upstream":
                got = mixtral_decoder_layer_forward(layer, positions, x, residual)
            elif style == "kv-cache-era":
                got = mixtral_decoder_layer_forward(layer, positions, x, "cache", object(), residual)
            else:
                got = mixtral_decoder_layer_forward(layer, positions=positions, hidden_states=x, residual=residual)
    assert taken == [path]
    torch.testing.assert_close(got[0], want[0], **TOL[torch.float32])
    torch.testing.assert_close(got[1], want[1], **TOL[torch.float32])


def test_block_without_reachable_weights_is_called_as_is():
    block, _, _ = reference_block(top_k=2)
    calls = []
    opaque = lambda h: calls.append(h.shape) or h * 2  # noqa: E731
    x = torch.randn(3, 64)
    torch.testing.assert_close(sparse_moe(opaque, x), x * 2)
    assert calls == [(3, 64)]


@pytest.mark.parametrize(
    "args, kwargs, needle",
    [
        ((1, 2, 3, 4, 5, 6, 7), {}, "got 7 positional arguments"),
        ((), {"hidden_states": 1}, "missing=['positions']"),
        ((1, 2), {"cache": 3}, "unknown=['cache']"),
        ((1, 2), {"positions": 1}, "got 'positions' twice"),
    ],
)
def test_uninterpretable_calls_name_the_shim(args, kwargs, needle):
    block, w13, w2 = reference_block(top_k=2)
    with pytest.raises(ShimError) as err:
        mixtral_decoder_layer_forward(Layer(block, w13, w2, 2), *args, **kwargs)
    assert "enginex-compat shim ixformer.contrib.vllm.layers" in str(err.value) and needle in str(err.value)


# --- the static path (CUDA graph capture) -------------------------------------------------------


class HostSync(AssertionError):
    pass


aten = torch.ops.aten
# Ops whose result needs the device's data on the host: a scalar read, or an output shape that
# depends on the values.
DATA_DEPENDENT = {
    aten._local_scalar_dense,
    aten.nonzero,
    aten.bincount,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.unique_consecutive,
    aten.unique_dim_consecutive,
    aten.masked_select,
    aten.equal,
}
INDEX_OPS = {aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_}


def _device_of(value):
    return value.device if isinstance(value, torch.Tensor) else None


class NoHostSync(TorchDispatchMode):
    """Fails on whatever a CUDA graph capture forbids: host reads of device data, ops with
    data-dependent output shapes and copies between devices. Tensor.tolist and Tensor.numpy read
    CPU memory without dispatching an op, so they are refused directly."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in DATA_DEPENDENT:
            raise HostSync(f"data-dependent op {func}")
        if packet is aten.repeat_interleave and func._overloadname != "self_int":
            raise HostSync(f"repeat_interleave with tensor repeats ({func})")
        if packet in INDEX_OPS:
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
                raise HostSync(f"boolean-mask indexing ({func})")
        if packet is aten._to_copy and kwargs.get("device") is not None:
            if torch.device(kwargs["device"]) != args[0].device:
                raise HostSync(f"copy {args[0].device} -> {kwargs['device']} ({func})")
        if packet in (aten.copy_, aten.copy, aten._copy_from, aten._copy_from_and_resize):
            if _device_of(args[0]) != _device_of(args[1]):
                raise HostSync(f"copy between {_device_of(args[0])} and {_device_of(args[1])} ({func})")
        return func(*args, **kwargs)

    def __enter__(self):
        self._patches = [mock.patch.object(torch.Tensor, name, _refuse(name)) for name in ("tolist", "numpy")]
        for patch in self._patches:
            patch.start()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for patch in reversed(self._patches):
                patch.stop()


def _refuse(name):
    def refuse(*args, **kwargs):
        raise HostSync(f"Tensor.{name}() reads device data on the host")

    return refuse


@pytest.mark.parametrize(
    "what, sync",
    [
        ("tolist", lambda x: x.tolist()),
        ("numpy", lambda x: x.numpy()),
        ("item", lambda x: x.sum().item()),
        ("bool", lambda x: bool(x.sum() > 0)),
        ("nonzero", lambda x: torch.nonzero(x)),
        ("where-1-arg", lambda x: torch.where(x > 0)),
        ("bincount", lambda x: torch.bincount(x.abs().long())),
        ("unique", lambda x: torch.unique(x)),
        ("unique-consecutive", lambda x: torch.unique_consecutive(x)),
        ("masked_select", lambda x: torch.masked_select(x, x > 0)),
        ("bool-index", lambda x: x[x > 0]),
        ("bool-index-put", lambda x: x.index_put_((x > 0,), torch.tensor(0.0))),
        ("repeat_interleave", lambda x: torch.repeat_interleave(x, x.abs().long())),
        ("equal", lambda x: torch.equal(x, x)),
        ("to-other-device", lambda x: x.to("meta")),
        ("copy-across-devices", lambda x: torch.empty(4, device="meta").copy_(x)),
    ],
)
def test_the_no_host_sync_check_can_fail(what, sync):
    x = torch.tensor([1.0, -2.0, 0.0, 3.0])
    with pytest.raises(HostSync), NoHostSync():
        sync(x)


def test_the_no_host_sync_check_lets_static_ops_through_and_restores_tensor():
    x = torch.randn(4, 3)
    with NoHostSync():
        y = torch.zeros(4, 3).scatter_(1, torch.topk(x, 2).indices, 1.0).masked_fill_(x > 0, 0) @ x.t()
        torch.repeat_interleave(x, 2, dim=0)
    assert y.shape == (4, 4) and isinstance(x.tolist(), list)


@pytest.mark.parametrize("tokens", [1, 8, 64])
def test_grouped_path_fails_the_check(tokens):
    _, w13, w2 = reference_block(top_k=2)
    x, logits = torch.randn(tokens, 64), torch.randn(tokens, 8)
    with pytest.raises(HostSync), NoHostSync():
        moe_forward_grouped(x, logits, w13, w2, 2)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("tokens", [1, 8, 64, 300])
@pytest.mark.parametrize("top_k", [1, 2])
def test_static_path_never_synchronises(device, tokens, top_k):
    """On "meta" no tensor holds data at all, so any read of values would fail there too."""
    _, w13, w2 = reference_block(top_k)
    x, logits = torch.randn(tokens, 64, device=device), torch.randn(tokens, 8, device=device)
    w13, w2 = w13.detach().to(device), w2.detach().to(device)
    with torch.no_grad(), NoHostSync():
        out = moe_forward_static(x, logits, w13, w2, top_k, renormalize=top_k > 1)
    assert out.shape == (tokens, 64) and out.device.type == device


def routed_block(top_k: int, renormalize: bool, dtype):
    """A transformers block with this routing: Mixtral always renormalises the top-k weights,
    Qwen3-MoE does so only with norm_topk_prob. Returns (block, w13, w2)."""
    if renormalize:
        return reference_block(top_k, dtype=dtype)
    torch.manual_seed(0)
    config = Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=96, num_experts=8, num_experts_per_tok=top_k, norm_topk_prob=False)
    block = Qwen3MoeSparseMoeBlock(config).eval().to(dtype)
    w13 = torch.stack([torch.cat([e.gate_proj.weight, e.up_proj.weight]) for e in block.experts])
    w2 = torch.stack([e.down_proj.weight for e in block.experts])
    return block, w13, w2


def block_output(block, x, logits):
    """The block's MoE on exactly these router logits."""
    block.gate.forward = lambda h: logits
    out, _ = block(x.reshape(1, *x.shape))
    return out.reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("top_k", [1, 2])
@pytest.mark.parametrize("tokens", [1, 8, 64, 300])
@pytest.mark.parametrize("renormalize", [True, False])
def test_static_path_equals_grouped_path_and_transformers(dtype, top_k, tokens, renormalize):
    block, w13, w2 = routed_block(top_k, renormalize, dtype)
    x = torch.randn(tokens, 64, dtype=dtype)
    with torch.no_grad():
        logits = block.gate(x)
        want = block_output(block, x, logits)
        grouped = moe_forward_grouped(x, logits, w13, w2, top_k, renormalize)
        static = moe_forward_static(x, logits, w13, w2, top_k, renormalize)
    torch.testing.assert_close(grouped, want, **TOL[dtype])
    torch.testing.assert_close(static, want, **TOL[dtype])
    torch.testing.assert_close(static, grouped, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("path", [moe_forward_grouped, moe_forward_static])
def test_idle_experts_on_both_paths(dtype, path):
    block, w13, w2 = reference_block(top_k=2, dtype=dtype)
    x = torch.randn(64, 64, dtype=dtype)
    with torch.no_grad():
        logits = block.gate(x)
        logits[:, 4:] = -1e4  # experts 4..7 never chosen
        want = block_output(block, x, logits)
        got = path(x, logits, w13, w2, 2)
    torch.testing.assert_close(got, want, **TOL[dtype])


def test_an_idle_expert_with_non_finite_output_does_not_reach_the_static_result():
    _, w13, w2 = reference_block(top_k=2)
    w2 = w2.clone()
    w2[7] = float("inf")
    x, logits = torch.randn(16, 64), torch.randn(16, 8)
    logits[:, 7] = -1e4
    with torch.no_grad():
        static = moe_forward_static(x, logits, w13, w2, 2)
        grouped = moe_forward_grouped(x, logits, w13, w2, 2)
    assert torch.isfinite(static).all()
    torch.testing.assert_close(static, grouped, **TOL[torch.float32])


def force_path(monkeypatch, path: str) -> list:
    """Make moe_forward take `path` ("grouped" or "static"); returns the list of paths taken."""
    taken = []

    def spy(name, fn):
        def wrapper(*args, **kwargs):
            taken.append(name)
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(layers.core, "static_moe_required", lambda hidden_states: path == "static")
    monkeypatch.setattr(layers.core, "moe_forward_grouped", spy("grouped", layers.moe_forward_grouped))
    monkeypatch.setattr(layers.core, "moe_forward_static", spy("static", layers.moe_forward_static))
    return taken


@pytest.mark.parametrize("path", ["grouped", "static"])
def test_moe_forward_takes_the_path_the_decision_names(path, monkeypatch):
    taken = force_path(monkeypatch, path)
    _, w13, w2 = reference_block(top_k=2)
    x = torch.randn(2, 3, 64)
    with torch.no_grad():
        out = moe_forward(x, torch.randn(6, 8), w13, w2, 2)
    assert taken == [path] and out.shape == (2, 3, 64)


def test_the_decision_is_the_grouped_path_off_capture():
    # On a CPU tensor the capture query is never asked (a CPU-only torch raises from it).
    with mock.patch.object(torch.cuda, "is_current_stream_capturing", side_effect=AssertionError("asked")):
        assert static_moe_required(torch.randn(2, 4)) is False


@pytest.mark.parametrize("capturing, expected", [(True, True), (False, False), (RuntimeError("no CUDA"), False)])
def test_the_decision_follows_the_capture_state_of_a_cuda_tensor(capturing, expected):
    cuda_tensor = mock.Mock(is_cuda=True)
    kwargs = {"side_effect": capturing} if isinstance(capturing, Exception) else {"return_value": capturing}
    with mock.patch.object(torch.cuda, "is_current_stream_capturing", **kwargs):
        assert static_moe_required(cuda_tensor) is expected
