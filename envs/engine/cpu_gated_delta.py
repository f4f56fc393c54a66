"""Let this venv's vLLM 0.11 (the nv-a100 and hygon-k100 engine generation, the CPU build) run its
own Gated DeltaNet layers (Qwen3-Next's, vllm/model_executor/models/qwen3_next.py, which the image's
Qwen3.5 backport for this generation reuses) with torch arithmetic on the CPU.

A harness patch of the CPU stand-in, never of the image: on the card, the engine's own kernels run
(the flash-linear-attention Triton kernels of vllm/model_executor/layers/fla/ops, the causal
convolution of vllm/model_executor/layers/mamba/ops/causal_conv1d.py, qwen3_next.py's fused gating).
Without Triton (the CPU build disables it) the engine cannot even import them ("module
'triton.language' has no attribute 'exp'", fla/ops/op.py), and three CPU-only parts of the
engine stop a hybrid model before its first token. Five edits, each anchored on the exact text of
0.11.0's files:
  fla/ops/op.py     its module-level aliases of Triton's exp/log/log2 become None where Triton's
                    language placeholder lacks them, so the package imports (its kernels are
                    never called on the CPU);
  layers/utils.py   the CPU build repacks every unquantized linear layer's weight for its GEMM
                    after loading and drops the original; the DeltaNet keeps its convolution's
                    weight ([channels, 1, kernel]) in a linear layer and reads it directly: a
                    weight that is no matrix is left as it is (on the card no repacking runs);
  gdn_attn.py       the GDN metadata builder sizes its CUDA-graph buffers by the compilation
                    config's max_capture_size, which the CPU platform leaves None (it captures
                    no graphs): none;
  cpu_model_runner.py  the CPU runner refuses a model of several KV cache groups, which every
                    hybrid is (attention and linear-attention layers): each torch SDPA group's
                    builder orders the batch as it does for one group (prompts first), and the
                    GDN groups' metadata reads each sequence's span in any order (the card's GPU
                    runner serves several groups itself);
  qwen3_next.py     at its end, on the CPU platform only, the six kernels its Gated DeltaNet calls
                    by module name are bound to the stand-ins below, which keep the kernels'
                    calling conventions (varlen sequences by query_start_loc / cu_seqlens, each
                    sequence's state in its slot of the engine's mamba-style cache, updated in
                    place) and compute with the reference arithmetic of the engine's own
                    dependencies: transformers' torch Gated DeltaNet (torch_chunk_gated_delta_rule
                    for a prompt, torch_recurrent_gated_delta_rule for a decode step,
                    torch_causal_conv1d_update for the causal convolution, modeling_qwen3_next.py
                    of the venv's transformers 4.57) and vLLM's own rms_norm_ref for the gated
                    norm.
What a cell on this stand-in proves is the model code around the kernels (projections and their
layouts, sharding, the engine's state slots and metadata, attention, experts, loading); the
kernels' own arithmetic on the card is the engine's, which its Qwen3-Next shares. One difference
the stand-in does not copy: the card's chunked kernel refuses float32 queries
("ChunkGatedDeltaRuleFunction does not support float32"), where the cells run float32 (a
checkpoint's own bf16 is what the platform serves).

Running it again is a no-op (an applied edit is recognised by its replacement text); an anchor
not found exactly once is refused before anything is written (another vLLM than 0.11.0). The
patched engine imports this file as the module `enginex_cpu_gated_delta`, which apply() writes
beside the vllm package.

usage: python cpu_gated_delta.py   (with the venv's python: it finds vLLM without importing it;
tests/unit/test_cpu_gated_delta.py applies it to the 0.11.0 sdist's own files)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

MODULE = "enginex_cpu_gated_delta"  # what the edited qwen3_next.py imports
MARK = "# enginex-compat: CPU GDN stand-in (envs/engine/cpu_gated_delta.py)"

EDITS: List[Tuple[str, str, str]] = [
    (
        "model_executor/layers/fla/ops/op.py",
        "    exp = tl.exp\n    log = tl.log\n    log2 = tl.log2\n",
        f"    {MARK}: importable without Triton\n"
        '    exp = getattr(tl, "exp", None)\n'
        '    log = getattr(tl, "log", None)\n'
        '    log2 = getattr(tl, "log2", None)\n',
    ),
    (
        "model_executor/layers/utils.py",
        "    N, K = layer.weight.size()\n    dtype = layer.weight.dtype\n",
        f"    if layer.weight.dim() != 2:  {MARK}: a convolution's\n"
        "        return  # weight ([channels, 1, kernel]) kept in a linear layer is read as it is, never a GEMM\n"
        "    N, K = layer.weight.size()\n    dtype = layer.weight.dtype\n",
    ),
    (
        "v1/attention/backends/gdn_attn.py",
        "            (self.num_spec + 1), self.compilation_config.max_capture_size)\n",
        "            (self.num_spec + 1), self.compilation_config.max_capture_size or 0)\n"
        f"        {MARK}: the CPU platform\n"
        "        # captures no CUDA graphs and leaves max_capture_size None: no graph buffers\n",
    ),
    (
        "v1/worker/cpu_model_runner.py",
        "        if len(self.kv_cache_config.kv_cache_groups) > 1:\n"
        '            raise ValueError("Multiple KVCacheGroups is not"\n'
        '                             "currently supported with CPU model runner.")\n',
        "        if len(self.kv_cache_config.kv_cache_groups) > 1:\n"
        f"            {MARK}: a hybrid model's\n"
        "            # groups. Each torch SDPA group's builder orders the batch (prompts first) and keeps its\n"
        "            # prompt count; the Gated DeltaNet groups read each sequence's span in any order.\n"
        '            for group in getattr(self, "attn_groups", None) or ():\n'
        "                for attn_group in group:\n"
        '                    for builder in getattr(attn_group, "metadata_builders", None) or ():\n'
        "                        if isinstance(builder, TorchSDPAMetadataBuilderV1):\n"
        "                            builder.reorder_batch(self.input_batch, scheduler_output)\n"
        "            return\n",
    ),
    (
        "model_executor/models/qwen3_next.py",
        "                                  num_warps=1)\n    return g\n",
        "                                  num_warps=1)\n    return g\n"
        "\n\n"
        f"{MARK}: on the CPU the kernels above are\n"
        "# the harness's torch stand-ins; on a card's engine they run as they are.\n"
        "if current_platform.is_cpu():\n"
        f"    from {MODULE} import (  # noqa: E402, F811\n"
        "        RMSNormGated, causal_conv1d_fn, causal_conv1d_update, chunk_gated_delta_rule,\n"
        "        fused_gdn_gating, fused_recurrent_gated_delta_rule)\n",
    ),
]


def apply(root: Path, site: Optional[Path] = None) -> List[str]:
    """Edit the vLLM package at `root` and write this module beside it (into `site`, default the
    package's parent) as MODULE; what was done, per edit. Raises ValueError, before any file is
    written, when an anchor is not found exactly once (another vLLM than 0.11.0). Each file is
    replaced, never written in place (a venv copied with hard links keeps its original intact)."""
    source_edits = _installer()
    done = source_edits.apply_edits(root, EDITS, "0.11.0")
    target = (site or root.parent) / f"{MODULE}.py"
    source_edits.replace_file(target, Path(__file__).read_text())
    done.append(f"{target.name} written")
    return done


def _installer():
    """envs/source_edits.py: importable where this file is the installer, not where it is the
    engine's module (MODULE, in the venv's site-packages)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import source_edits

    return source_edits


# ---- The stand-ins (imported by the patched engine as MODULE; torch only there) ----------------
# Each batch's sequences are grouped by length and each group runs as one batch of transformers'
# functions (their batch dimension is independent sequences), its states gathered from their
# slots and written back: the arithmetic of one sequence at a time, without a Python loop over
# the sequences of a decode step.

if __name__ == MODULE:
    import torch
    import torch.nn.functional as F
    from transformers.models.qwen3_next.modeling_qwen3_next import (
        torch_causal_conv1d_update,
        torch_chunk_gated_delta_rule,
        torch_recurrent_gated_delta_rule,
    )
    from vllm.model_executor.layers.fla.ops.layernorm_guard import RMSNormGated as _EngineRMSNormGated
    from vllm.model_executor.layers.fla.ops.layernorm_guard import rms_norm_ref

    PAD_SLOT_ID = -1  # vllm.attention.backends.utils: a padded entry, which the kernels leave alone

    def _groups(starts, slots) -> Dict[int, List[Tuple[int, int, int]]]:
        """length -> [(sequence, first token, slot)] of the sequences whose slot is not padding."""
        bounds, found = starts.tolist(), {}
        for n, (bos, eos) in enumerate(zip(bounds[:-1], bounds[1:])):
            slot = int(slots[n]) if slots is not None else n
            if slot != PAD_SLOT_ID and eos > bos:
                found.setdefault(eos - bos, []).append((n, bos, slot))
        return found

    def _stack(x, group, length: int, dim: int):
        """The group's token spans of x along `dim`, stacked as a batch."""
        return torch.stack([x.narrow(dim, bos, length) for _, bos, _ in group])

    def _put(out, values, group, length: int, dim: int) -> None:
        for (_, bos, _), value in zip(group, values):
            out.narrow(dim, bos, length).copy_(value)

    def _silu_only(activation) -> None:
        # transformers' convolution always applies SiLU, as Qwen3-Next's layers ask (hidden_act).
        if activation not in (True, "silu", "swish"):
            raise NotImplementedError(f"CPU GDN stand-in: causal convolution with activation {activation!r}")

    def causal_conv1d_fn(
        x,
        weight,
        bias,
        conv_states,
        query_start_loc,
        cache_indices=None,
        has_initial_state=None,
        activation="silu",
        pad_slot_id=-1,
        metadata=None,
        validate_data=False,
    ):
        """x [dim, tokens] (sequences one after another); each sequence's convolution starts from
        its slot's last inputs where has_initial_state says so (zeros otherwise), and leaves its
        own last inputs there."""
        _silu_only(activation)
        out = torch.empty_like(x)
        for length, group in _groups(query_start_loc, cache_indices).items():
            slots = torch.tensor([slot for _, _, slot in group], dtype=torch.long, device=x.device)
            states = conv_states[slots]  # a copy, written back below
            if has_initial_state is not None:
                states[~has_initial_state[[n for n, _, _ in group]]] = 0
            done = torch_causal_conv1d_update(_stack(x, group, length, 1).to(states.dtype), states, weight, bias)
            _put(out, done.to(x.dtype), group, length, 1)
            conv_states[slots] = states
        return out

    def causal_conv1d_update(
        x,
        conv_state,
        weight,
        bias=None,
        activation=None,
        cache_seqlens=None,
        conv_state_indices=None,
        num_accepted_tokens=None,
        query_start_loc=None,
        max_query_len=-1,
        pad_slot_id=-1,
        validate_data=False,
    ):
        """Decode steps: x [batch, dim] (or [batch, dim, tokens]), each row's state in its slot."""
        _silu_only(activation)
        if cache_seqlens is not None or num_accepted_tokens is not None or query_start_loc is not None:
            raise NotImplementedError("CPU GDN stand-in: circular or speculative convolution states")
        steps = x.unsqueeze(-1) if x.dim() == 2 else x
        rows = conv_state_indices if conv_state_indices is not None else torch.arange(len(x), device=x.device)
        kept = (rows != PAD_SLOT_ID).nonzero().flatten()
        out = torch.zeros_like(steps)
        slots = rows[kept].long()
        states = conv_state[slots]  # a copy, written back below
        out[kept] = torch_causal_conv1d_update(steps[kept].to(states.dtype), states, weight, bias).to(x.dtype)
        conv_state[slots] = states
        return out.squeeze(-1) if x.dim() == 2 else out

    def _value_heads(q, k, heads: int):
        group = heads // q.shape[-2]
        return (q, k) if group == 1 else (q.repeat_interleave(group, dim=-2), k.repeat_interleave(group, dim=-2))

    def _default_scale(k, scale) -> None:
        if scale is not None and abs(scale - k.shape[-1] ** -0.5) > 1e-12:
            raise NotImplementedError(f"CPU GDN stand-in: scale {scale} (transformers' reference scales by key_dim**-0.5)")

    def _sequences(q, k, v, g, beta, group, length: int):
        """The group's q, k (repeated to the value heads), v, g, beta as [sequences, tokens, ...]."""
        q, k, v, g, beta = (_stack(t[0], group, length, 0) for t in (q, k, v, g, beta))
        return (*_value_heads(q, k, v.shape[-2]), v, g, beta)

    def chunk_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta,
        scale=None,
        initial_state=None,
        output_final_state=False,
        cu_seqlens=None,
        head_first=False,
        use_qk_l2norm_in_kernel=False,
    ):
        """Prompts: q, k [1, tokens, key heads, dk], v [1, tokens, value heads, dv], g, beta
        [1, tokens, value heads]; initial_state [sequences, value heads, dk, dv], one per
        sequence in order. -> (o like v, the final states in float32)."""
        _default_scale(k, scale)
        if head_first:
            raise NotImplementedError("CPU GDN stand-in: head_first layout")
        starts = cu_seqlens if cu_seqlens is not None else torch.tensor([0, q.shape[1]])
        out = torch.empty_like(v)
        finals = torch.zeros((len(starts) - 1, *v.shape[-2:-1], k.shape[-1], v.shape[-1]), dtype=torch.float32, device=v.device)
        for length, group in _groups(starts, None).items():
            order = [n for n, _, _ in group]
            state = initial_state[order] if initial_state is not None else None
            o, final = torch_chunk_gated_delta_rule(
                *_sequences(q, k, v, g, beta, group, length),
                initial_state=state,
                output_final_state=True,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            )
            _put(out[0], o.to(out.dtype), group, length, 0)
            finals[order] = final
        return out, (finals if output_final_state else None)

    def fused_recurrent_gated_delta_rule(
        q,
        k,
        v,
        g,
        beta=None,
        scale=None,
        initial_state=None,
        inplace_final_state=True,
        cu_seqlens=None,
        ssm_state_indices=None,
        num_accepted_tokens=None,
        use_qk_l2norm_in_kernel=False,
    ):
        """Decode steps: each sequence's tokens (cu_seqlens) from its slot's state
        (ssm_state_indices), which is updated in place."""
        _default_scale(k, scale)
        if num_accepted_tokens is not None or not inplace_final_state or (ssm_state_indices is not None and ssm_state_indices.dim() != 1):
            raise NotImplementedError("CPU GDN stand-in: speculative decoding or states kept per token")
        if beta is None:
            beta = torch.ones_like(g)
        starts = cu_seqlens if cu_seqlens is not None else torch.arange(q.shape[1] + 1)
        out = torch.zeros_like(v)
        for length, group in _groups(starts, ssm_state_indices).items():
            slots = torch.tensor([slot for _, _, slot in group], dtype=torch.long, device=v.device)
            o, final = torch_recurrent_gated_delta_rule(
                *_sequences(q, k, v, g, beta, group, length),
                initial_state=initial_state[slots],
                output_final_state=True,
                use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
            )
            _put(out[0], o.to(out.dtype), group, length, 0)
            initial_state[slots] = final.to(initial_state.dtype)
        return out, initial_state

    def fused_gdn_gating(A_log, a, dt_bias, beta: float = 1.0, threshold: float = 20.0):
        """g = -exp(A_log) * softplus(a + dt_bias), in float32 (qwen3_next.py's own comment)."""
        return -A_log.float().exp() * F.softplus(a.float() + dt_bias.float(), beta=beta, threshold=threshold)

    class RMSNormGated(_EngineRMSNormGated):
        """The engine's gated norm, computed by its own torch reference (rms_norm_ref)."""

        def forward(self, x, z=None):
            return rms_norm_ref(
                x, self.weight, self.bias, z=z, eps=self.eps, group_size=self.group_size, norm_before_gate=self.norm_before_gate
            )


if __name__ == "__main__":
    sys.exit(_installer().run("cpu gated delta", apply))
