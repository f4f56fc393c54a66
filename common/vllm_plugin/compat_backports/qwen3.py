"""Qwen3 (`Qwen3ForCausalLM`) for the vLLM 0.5.5 generation: the shared decoder (layers/decoder.py)
as it stands, whose defaults are Qwen3's.

Qwen3 is the Qwen2 layout with three differences (transformers' modeling_qwen3.py): each head's
query and key go through their own RMSNorm (`q_norm`, `k_norm`, one weight of head_dim) before
the rotary embedding; `head_dim` is explicit in the config, not hidden/heads; the attention
projections take `attention_bias` (False in every published Qwen3), o_proj included. The decoder
follows the engine's qwen2.py, so the vendor fork's kernels serve it as they serve Qwen2. Imported
only inside the engine, by the compat plugin, when the preflight asks.
"""

from .layers.decoder import DecoderForCausalLM


class Qwen3ForCausalLM(DecoderForCausalLM):
    """The class the plugin registers for Qwen3: the decoder with its Qwen3 defaults."""
