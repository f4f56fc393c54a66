"""The Gated DeltaNet token mixer's arithmetic (Qwen3.5's linear-attention layers), in plain torch.

Facts from transformers 5's modeling_qwen3_5.py, written here from the recurrence itself:
- a causal depthwise convolution (kernel K, no bias) over the fused q|k|v projection, then SiLU;
  across steps each sequence keeps its last K-1 inputs (zeros before the first token);
- per head a state S (key dim x value dim, float32). With q and k L2-normalised (eps 1e-6 under
  the root), q scaled by key_dim**-0.5, each token t does
      S <- exp(g_t) * S;   S <- S + k_t (beta_t (v_t - S^T k_t))^T;   o_t = S^T q_t
  where g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b); key heads serve
  value_heads / key_heads consecutive value heads each.
Decode runs that recurrence one token at a time (`recurrent`); a prompt runs it in chunks
(`chunked`), the delta updates of one chunk solved at once as a unit lower-triangular system
(the "UT transform" of the DeltaNet papers), so that a prompt costs matrix products, not a token
loop. Only generic torch operators: the same code runs on the vendor fork's torch on the card.
"""

from typing import Tuple

import torch
import torch.nn.functional as F

CHUNK = 64  # tokens solved at once in a prompt (as the reference's chunked form)


def conv_prompt(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """One sequence's prompt tokens through the causal depthwise convolution and SiLU.
    x: [T, C]; weight: [C, K]; state: [C, K-1], the inputs before x. -> (out [T, C], new state)."""
    window = torch.cat([state.to(x.dtype), x.t()], dim=1)  # [C, K-1+T]
    out = F.conv1d(window.unsqueeze(0).to(weight.dtype), weight.unsqueeze(1), groups=weight.shape[0])[0]
    return F.silu(out).t().to(x.dtype), window[:, window.shape[1] - state.shape[1] :]


def conv_step(x: torch.Tensor, weight: torch.Tensor, state: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per sequence. x: [B, C]; state: [B, C, K-1]. -> (out [B, C], new state)."""
    window = torch.cat([state.to(x.dtype), x.unsqueeze(-1)], dim=-1)  # [B, C, K]
    out = (window.to(weight.dtype) * weight).sum(-1)
    return F.silu(out).to(x.dtype), window[..., 1:]


def prepare(
    q: torch.Tensor, k: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, group: int
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, k, log-decay g, beta) in float32 from the layer's projections: q, k [T, key heads, dk]
    repeated to the value heads, normalised, q scaled; a, b [T, value heads]."""
    q, k = q.float(), k.float()
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + 1e-6)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    if group > 1:
        q, k = q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2)
    q = q * q.shape[-1] ** -0.5
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias.float())
    return q, k, g, b.float().sigmoid()


def recurrent(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One token per sequence: q, k [B, H, dk], v [B, H, dv], g, beta [B, H], state [B, H, dk, dv]
    (float32). -> (o [B, H, dv], new state)."""
    v = v.float()
    state = state * g.exp()[..., None, None]
    seen = torch.einsum("bhk,bhkv->bhv", k, state)
    state = state + k.unsqueeze(-1) * ((v - seen) * beta.unsqueeze(-1)).unsqueeze(-2)
    return torch.einsum("bhk,bhkv->bhv", q, state), state


def chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, state: torch.Tensor, chunk: int = CHUNK
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One sequence's prompt: q, k [T, H, dk], v [T, H, dv], g, beta [T, H], state [H, dk, dv]
    (float32). -> (o [T, H, dv], state after the last token).

    Within a chunk, with G the cumulative log-decay from the chunk's start and D[i, j] =
    exp(G_i - G_j), the value each token writes (its delta) is u_i = beta_i (v_i - exp(G_i) S0^T k_i
    - sum_{j<i} D[i, j] (k_i . k_j) u_j): a unit lower-triangular system in u. Then
    o_i = exp(G_i) S0^T q_i + sum_{j<=i} D[i, j] (q_i . k_j) u_j and the state after the chunk is
    exp(G_last) S0 + sum_j exp(G_last - G_j) k_j u_j^T."""
    q, k, v, g, beta = (x.transpose(0, 1).float() for x in (q, k, v, g, beta))  # heads first
    out = torch.empty_like(v)
    for start in range(0, q.shape[1], chunk):
        part = slice(start, start + chunk)
        qc, kc, vc, bc = q[:, part], k[:, part], v[:, part], beta[:, part]
        cum = g[:, part].cumsum(-1)  # [H, C]
        n = cum.shape[-1]
        causal = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2)).masked_fill(~causal, float("-inf")).exp()  # D, 0 above
        system = (kc @ kc.transpose(-1, -2)) * decay * bc.unsqueeze(-1)
        system = system.tril(-1) + torch.eye(n, dtype=system.dtype, device=system.device)
        start_decay = cum.exp().unsqueeze(-1)  # exp(G_i)
        rhs = torch.cat([vc * bc.unsqueeze(-1), kc * (bc.unsqueeze(-1) * start_decay)], dim=-1)
        solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
        u = solved[..., : vc.shape[-1]] - solved[..., vc.shape[-1] :] @ state  # the deltas, S0's part taken out
        out[:, part] = (qc * start_decay) @ state + ((qc @ kc.transpose(-1, -2)) * decay) @ u
        tail = (cum[:, -1:] - cum).exp().unsqueeze(-1)  # exp(G_last - G_j)
        state = state * cum[:, -1].exp()[:, None, None] + (kc * tail).transpose(-1, -2) @ u
    return out.transpose(0, 1), state


def gated_rms_norm(x: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Each head's output (rounded to the model's dtype, as the reference hands it over)
    normalised in float32, scaled by the weight in the model's dtype, then times SiLU(gate):
    x, gate [T, H, dv] -> [T, H, dv] in the model's dtype."""
    dtype = gate.dtype
    x = x.to(dtype).float()
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * normed.to(dtype)).float().mul(F.silu(gate.float())).to(dtype)
