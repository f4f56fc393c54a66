"""The Gated DeltaNet arithmetic of Qwen3.5's backport (compat_backports/layers/gated_delta.py) against
transformers' own reference implementation of the same layer (Qwen3-Next's, in the transformers
of this venv; Qwen3.5 shares it): the chunked prompt form, the one-token recurrent form, a prompt
split across calls (recomputation and chunked prefill continue from a state), the causal
convolution and its per-token update, and the gated norm."""

import pytest

torch = pytest.importorskip("torch")
reference = pytest.importorskip("transformers.models.qwen3_next.modeling_qwen3_next")

from common.vllm_plugin.compat_backports.layers import gated_delta  # noqa: E402

TOKENS, KEY_HEADS, VALUE_HEADS, KEY_DIM, VALUE_DIM = 150, 2, 4, 16, 8


@pytest.fixture
def inputs():
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(TOKENS, KEY_HEADS, KEY_DIM, generator=g) for _ in range(2))
    v = torch.randn(TOKENS, VALUE_HEADS, VALUE_DIM, generator=g)
    a, b = (torch.randn(TOKENS, VALUE_HEADS, generator=g) for _ in range(2))
    a_log, dt_bias = torch.randn(VALUE_HEADS, generator=g), torch.randn(VALUE_HEADS, generator=g)
    return q, k, v, a, b, a_log, dt_bias


def the_reference(q, k, v, a, b, a_log, dt_bias):
    g = -a_log.exp() * torch.nn.functional.softplus(a + dt_bias)
    # transformers' form: [batch, tokens, heads, dim], key heads repeated to the value heads.
    q, k = (x.repeat_interleave(VALUE_HEADS // KEY_HEADS, dim=1)[None] for x in (q, k))
    out, state = reference.torch_chunk_gated_delta_rule(
        q, k, v[None], g=g[None], beta=b.sigmoid()[None], output_final_state=True, use_qk_l2norm_in_kernel=True
    )
    return out[0], state[0]


def test_the_chunked_form_is_the_references(inputs):
    q, k, v, a, b, a_log, dt_bias = inputs
    expected, expected_state = the_reference(*inputs)
    qq, kk, g, beta = gated_delta.prepare(q, k, a, b, a_log, dt_bias, VALUE_HEADS // KEY_HEADS)
    out, state = gated_delta.chunked(qq, kk, v, g, beta, torch.zeros(VALUE_HEADS, KEY_DIM, VALUE_DIM))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state, expected_state, atol=1e-5, rtol=1e-5)


def test_token_by_token_and_a_split_prompt_continue_the_state(inputs):
    q, k, v, a, b, a_log, dt_bias = inputs
    expected, expected_state = the_reference(*inputs)
    qq, kk, g, beta = gated_delta.prepare(q, k, a, b, a_log, dt_bias, VALUE_HEADS // KEY_HEADS)
    state, outs = torch.zeros(1, VALUE_HEADS, KEY_DIM, VALUE_DIM), []
    for t in range(TOKENS):
        out, state = gated_delta.recurrent(qq[t : t + 1], kk[t : t + 1], v[t : t + 1], g[t : t + 1], beta[t : t + 1], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state[0], expected_state, atol=1e-5, rtol=1e-5)
    cut = 70  # across the first 64-token chunk, mid-way through the second
    first, middle = gated_delta.chunked(qq[:cut], kk[:cut], v[:cut], g[:cut], beta[:cut], torch.zeros(VALUE_HEADS, KEY_DIM, VALUE_DIM))
    second, last = gated_delta.chunked(qq[cut:], kk[cut:], v[cut:], g[cut:], beta[cut:], middle)
    torch.testing.assert_close(torch.cat([first, second]), expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(last, expected_state, atol=1e-5, rtol=1e-5)


def test_the_convolution_over_a_prompt_and_token_by_token():
    g = torch.Generator().manual_seed(1)
    channels, kernel = 6, 4
    weight, x = torch.randn(channels, kernel, generator=g), torch.randn(40, channels, generator=g)
    state = torch.zeros(1, channels, kernel - 1)
    expected = []
    for t in range(len(x)):  # the reference's per-token update, from a zero state
        expected.append(reference.torch_causal_conv1d_update(x[t][None, :, None], state, weight, None, "silu")[0, :, 0])
    expected = torch.stack(expected)
    prompt, conv_state = gated_delta.conv_prompt(x[:2], weight, torch.zeros(channels, kernel - 1))  # shorter than the kernel
    rest, _ = gated_delta.conv_prompt(x[2:10], weight, conv_state)
    outs, step_state = [prompt, rest], _[None]
    for t in range(10, len(x)):
        out, step_state = gated_delta.conv_step(x[t : t + 1], weight, step_state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs), expected, atol=1e-6, rtol=1e-5)


def test_the_gated_norm_is_the_references():
    g = torch.Generator().manual_seed(2)
    x, gate = torch.randn(5, VALUE_HEADS, VALUE_DIM, generator=g), torch.randn(5, VALUE_HEADS, VALUE_DIM, generator=g)
    norm = reference.Qwen3NextRMSNormGated(VALUE_DIM, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(VALUE_DIM, generator=g))
        expected = norm(x.reshape(-1, VALUE_DIM), gate.reshape(-1, VALUE_DIM)).reshape(x.shape)
    torch.testing.assert_close(gated_delta.gated_rms_norm(x, gate, norm.weight.detach(), 1e-6), expected)
