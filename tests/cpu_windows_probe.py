"""Run by the engine's Python (vLLM 0.5.5's CPU build): a windowed and a global layer of the
engine's own torch_sdpa attention, and the two again with Gemma 2's soft cap on the scores, over
the same batch and paged cache, against attention computed here with the author's mask (a token
sees the last `window` positions, itself included) and cap (cap * tanh(scores / cap)).

Usage: python cpu_windows_probe.py PLUGIN_DIR patched|vanilla -> one JSON line, the largest error of
each step, or what the engine raised: {"prefill_windowed", "prefill_global", "decode_windowed",
"decode_global", and the same of "capped_windowed" and "capped_global"}.
Two sequences whose windows start inside a block, on block tables that are not in order.
"""

import json
import sys

import torch

HEADS, KV_HEADS, SIZE, BLOCK, WINDOW = 4, 2, 64, 16, 8
CAP = 0.5  # low enough that the tanh bends the probe's scores (about unit variance)
LENGTHS = (21, 13)  # prompt lengths; one decode step follows
TABLES = ((5, 2), (7, 0))  # each sequence's physical blocks


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window, cap=None) -> torch.Tensor:
    """q [n, heads, size] over k, v [m, kv_heads, size]: query i is position m - n + i."""
    n, m = q.shape[0], k.shape[0]
    k, v = k.repeat_interleave(HEADS // KV_HEADS, dim=1), v.repeat_interleave(HEADS // KV_HEADS, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / SIZE**0.5
    if cap is not None:
        scores = torch.tanh(scores / cap) * cap
    pos_q, pos_k = torch.arange(m - n, m)[:, None], torch.arange(m)[None, :]
    allowed = pos_k <= pos_q
    if window is not None:
        allowed &= pos_k > pos_q - window
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).reshape(n, HEADS * SIZE)


def error(forward, args: tuple, want: torch.Tensor):
    """The largest difference of `forward(*args)` from `want`, or the name of what it raised."""
    try:
        return (forward(*args) - want).abs().max().item()
    except Exception as exc:  # the engine's own refusal is the answer here
        return type(exc).__name__


def main() -> None:
    plugin_dir, mode = sys.argv[1], sys.argv[2]
    from vllm.attention.backends.torch_sdpa import TorchSDPABackend, TorchSDPABackendImpl, TorchSDPAMetadata

    if mode == "patched":
        sys.path.insert(0, plugin_dir)
        import logging

        from compat_patches import cpu_windows as compat_cpu_windows

        assert compat_cpu_windows.install(logging.getLogger("probe"))
    torch.manual_seed(0)
    total = [n + 1 for n in LENGTHS]
    q = [torch.randn(n, HEADS, SIZE) for n in total]
    k = [torch.randn(n, KV_HEADS, SIZE) for n in total]
    v = [torch.randn(n, KV_HEADS, SIZE) for n in total]

    def slots(seq: int, positions) -> list:
        return [TABLES[seq][p // BLOCK] * BLOCK + p % BLOCK for p in positions]

    # name -> (window, cap); the engine's Attention passes each positionally, the cap last.
    shapes = {"windowed": (WINDOW, None), "global": (None, None), "capped_windowed": (WINDOW, CAP), "capped_global": (None, CAP)}
    layers, errors = {}, {}
    for name, (window, cap) in shapes.items():
        try:
            layers[name] = TorchSDPABackendImpl(HEADS, SIZE, SIZE**-0.5, KV_HEADS, None, window, "auto", None, cap)
        except Exception as exc:  # the engine's refusal of a soft cap
            errors[f"prefill_{name}"] = errors[f"decode_{name}"] = type(exc).__name__
    caches = {name: torch.zeros(TorchSDPABackend.get_kv_cache_shape(8, BLOCK, KV_HEADS, SIZE)) for name in layers}

    prefill = TorchSDPAMetadata(
        num_prefills=2,
        num_prefill_tokens=sum(LENGTHS),
        num_decode_tokens=0,
        slot_mapping=torch.tensor(slots(0, range(LENGTHS[0])) + slots(1, range(LENGTHS[1]))),
        is_prompt=True,
        seq_lens=list(LENGTHS),
        seq_lens_tensor=torch.tensor(LENGTHS),
        max_decode_seq_len=0,
        block_tables=torch.tensor([]),
    )
    flat = [torch.cat([t[i][: LENGTHS[i]] for i in range(2)]).reshape(sum(LENGTHS), -1) for t in (q, k, v)]
    for name, layer in layers.items():  # the windowed layer first: the engine would cache its mask for both
        want = torch.cat([reference(q[i][: LENGTHS[i]], k[i][: LENGTHS[i]], v[i][: LENGTHS[i]], *shapes[name]) for i in range(2)])
        errors[f"prefill_{name}"] = error(layer.forward, (*flat, caches[name], prefill), want)

    decode = TorchSDPAMetadata(
        num_prefills=0,
        num_prefill_tokens=0,
        num_decode_tokens=2,
        slot_mapping=torch.tensor(slots(0, [LENGTHS[0]]) + slots(1, [LENGTHS[1]])),
        is_prompt=False,
        seq_lens=None,
        seq_lens_tensor=torch.tensor(total, dtype=torch.int),
        max_decode_seq_len=max(total),
        block_tables=torch.tensor(TABLES, dtype=torch.int),
    )
    step = [torch.stack([t[i][-1] for i in range(2)]).reshape(2, -1) for t in (q, k, v)]
    for name, layer in layers.items():
        want = torch.cat([reference(q[i][-1:], k[i], v[i], *shapes[name]) for i in range(2)])
        errors[f"decode_{name}"] = error(layer.forward, (*step, caches[name], decode), want)
    print(json.dumps(errors))


if __name__ == "__main__":
    main()
