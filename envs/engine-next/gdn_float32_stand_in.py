"""The Gated DeltaNet layers' core (Qwen3-Next, Qwen3.5) in float32 for vLLM 0.32's CPU build: the
torch stand-in cpu_gdn_float32.py installs as vllm/model_executor/layers/mamba/ops/cpu/
compat_gdn_float32.py and the edited cpu_gdn_attention_core calls where its input is not BF16.

It does what the card's engine does in `_forward_core` (qwen_gdn_linear_attn.py) for the sequences
of one step, without speculative decoding: the causal convolution over q|k|v continued from each
sequence's conv state, then the gated delta rule continued from its recurrent state (a prompt in
chunks, a decode token by the recurrence), both states written back to the sequence's slot of
vLLM's cache. A sequence vLLM starts without a state (has_initial_state false) starts from zeros.
The arithmetic is compat_gated_delta.py's, the 0.5.5 backport's own (tested against transformers'
reference, tests/unit/test_gated_delta.py); this module only reads and writes vLLM's caches and
metadata around it. The recurrent state is kept as vLLM shapes it, [value heads, value dim, key
dim] per slot, and handed to the arithmetic as [value heads, key dim, value dim].
"""

import torch

from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

from .compat_gated_delta import chunked, conv_prompt, conv_step, prepare, recurrent


def _heads(layer, mixed_qkv, a, b):
    """q, k [T, key heads, dk], v [T, value heads, dv] and the float32 log-decay and beta."""
    query, key, value = (x.squeeze(0) for x in layer.rearrange_mixed_qkv(mixed_qkv))
    group = layer.num_v_heads // layer.num_k_heads
    query, key, g, beta = prepare(query, key, a, b, layer.A_log, layer.dt_bias, group)
    return query, key, value, g, beta


def forward(layer, meta, mixed_qkv: torch.Tensor, b: torch.Tensor, a: torch.Tensor, core_attn_out: torch.Tensor) -> None:
    """One step's non-speculative sequences of one layer: decodes first (one token each), then
    prefills, in the order of `meta` (vLLM's GDNAttentionMetadata). Writes `core_attn_out`."""
    if meta.spec_sequence_masks is not None or meta.num_accepted_tokens is not None:
        raise NotImplementedError("the float32 Gated DeltaNet stand-in runs no speculative decoding")
    conv1d = layer.conv1d
    if conv1d.bias is not None or layer.activation != "silu":
        raise NotImplementedError("the float32 Gated DeltaNet stand-in runs a convolution without bias, with SiLU")
    weight = conv1d.weight.view(conv1d.weight.size(0), conv1d.weight.size(2))  # [channels, width]
    conv_states = layer.kv_cache[0]
    if not is_conv_state_dim_first():
        conv_states = conv_states.transpose(-1, -2)  # a view: [slots, channels, width - 1]
    ssm_states = layer.kv_cache[1]  # [slots, value heads, value dim, key dim]
    slots = meta.non_spec_state_indices_tensor
    starts = meta.non_spec_query_start_loc
    decodes, decode_tokens = meta.num_decodes, meta.num_decode_tokens

    if decodes > 0:
        index = slots[:decodes].long()
        mixed, conv_states[index] = conv_step(mixed_qkv[:decode_tokens], weight, conv_states[index])
        query, key, value, g, beta = _heads(layer, mixed, a[:decode_tokens], b[:decode_tokens])
        state = ssm_states[index].transpose(-1, -2).float()
        out, state = recurrent(query, key, value, g, beta, state)
        ssm_states[index] = state.transpose(-1, -2).to(ssm_states.dtype)
        core_attn_out[:decode_tokens] = out.to(core_attn_out.dtype)

    for sequence in range(decodes, decodes + meta.num_prefills):
        first, last, slot = int(starts[sequence]), int(starts[sequence + 1]), int(slots[sequence])
        if not bool(meta.has_initial_state[sequence]):
            conv_states[slot] = 0
            ssm_states[slot] = 0
        mixed, conv_states[slot] = conv_prompt(mixed_qkv[first:last], weight, conv_states[slot])
        query, key, value, g, beta = _heads(layer, mixed, a[first:last], b[first:last])
        out, state = chunked(query, key, value, g, beta, ssm_states[slot].transpose(-1, -2).float())
        ssm_states[slot] = state.transpose(-1, -2).to(ssm_states.dtype)
        core_attn_out[first:last] = out.to(core_attn_out.dtype)
