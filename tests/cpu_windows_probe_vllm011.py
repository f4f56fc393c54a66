"""Run by vLLM 0.11.0's Python (the engine venv, CPU build): a windowed and a global layer of the
engine's own TorchSDPA attention, the two again with Gemma 2's soft cap on the scores and with
GPT-OSS's attention sinks, over one paged cache, against attention computed here with the
author's mask (a token sees the last `window` positions, itself included), cap
(cap * tanh(scores / cap)) and sinks (a logit per head beside the scores in the softmax, its
share dropped after).

Three steps as V1's scheduler makes them (it always chunks prefills): the first chunk of one
prompt beside a whole second prompt; the rest of the first prompt (its earlier keys already in the
cache) beside the second's first decode; a decode of both. Two sequences whose windows start inside
a block, on block tables that are not in order. The metadata is what TorchSDPAMetadataBuilderV1
builds for such a batch (prompts first).

stdin: {"upstream": the sdist's cpu_attn.py or null}. stdout, last line: {"patched": {...},
"vanilla": {...} or null}, each the largest error of every "<step>_<layer>", or the name of what
the engine raised. "patched" is the venv's own module (the harness patch applied); "vanilla" the
same file as vLLM 0.11.0 ships it, loaded beside it. The patched run also holds a windowed layer on
vLLM's own paged layout (the one it uses without Intel's extension) as "<step>_windowed_vllm_layout".
"""

import importlib.util
import json
import sys
from types import SimpleNamespace

import torch

HEADS, KV_HEADS, SIZE, BLOCK, WINDOW = 4, 2, 64, 16, 8
CAP = 0.5  # low enough that the tanh bends the probe's scores (about unit variance)
PROMPTS = (21, 13)
FIRST_CHUNK = 12  # of the first prompt
TABLES = ((5, 2), (7, 0))  # each sequence's physical blocks
SINK_SCALE = 2.0  # sinks large enough to take a visible share of each softmax
# (name, window, cap, sinks)
LAYERS = (
    ("windowed", WINDOW, None, False),
    ("global", None, None, False),
    ("capped_windowed", WINDOW, CAP, False),
    ("capped_global", None, CAP, False),
    ("sinks_windowed", WINDOW, None, True),
    ("sinks_global", None, None, True),
)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window, cap=None, sinks=None) -> torch.Tensor:
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
    if sinks is None:
        probs = scores.softmax(-1)
    else:
        probs = torch.cat([scores, sinks[:, None, None].expand(-1, n, 1)], dim=-1).softmax(-1)[..., :-1]
    return torch.einsum("hqk,khd->qhd", probs, v).reshape(n, HEADS * SIZE)


def steps():
    """Each step: [(sequence, first position, end position)], prompts first, and how many of them
    are prompts."""
    a, b = PROMPTS
    return [
        ("prefill", [(0, 0, FIRST_CHUNK), (1, 0, b)], 2),
        ("chunked", [(0, FIRST_CHUNK, a), (1, b, b + 1)], 1),
        ("decode", [(0, a, a + 1), (1, b + 1, b + 2)], 0),
    ]


def metadata(module, step, prompts: int):
    lens = [end for _, _, end in step]
    queries = [end - start for _, start, end in step]
    starts = torch.tensor([0] + queries).cumsum(0).to(torch.int32)
    kv_starts = torch.tensor([0] + lens).cumsum(0).to(torch.int32)
    tables = torch.tensor([TABLES[seq] for seq, _, _ in step], dtype=torch.int32)
    slots = [TABLES[seq][p // BLOCK] * BLOCK + p % BLOCK for seq, start, end in step for p in range(start, end)]
    return module.TorchSDPAMetadata(
        num_prefills=prompts,
        num_prefill_tokens=int(starts[prompts]),
        num_decode_tokens=int(starts[-1] - starts[prompts]),
        slot_mapping=torch.tensor(slots, dtype=torch.long),
        seq_lens=lens,
        seq_lens_tensor=torch.tensor(lens[prompts:], dtype=torch.int32),
        max_decode_seq_len=max(lens[prompts:], default=0),
        block_tables=tables[prompts:],
        chunked_prefill=True,  # V1 on the CPU always chunks prefills
        max_query_len=max(queries),
        max_kv_len=max(lens[:prompts], default=0),
        prefill_query_start_loc=starts[: prompts + 1],
        kv_start_loc=kv_starts[: prompts + 1],
        prefill_block_tables=tables[:prompts],
        query_start_loc=starts,
    )


def run(module, layout_too: bool) -> dict:
    torch.manual_seed(0)
    total = [n + 2 for n in PROMPTS]  # each prompt and two decoded tokens
    q = [torch.randn(n, HEADS, SIZE) for n in total]
    k = [torch.randn(n, KV_HEADS, SIZE) for n in total]
    v = [torch.randn(n, KV_HEADS, SIZE) for n in total]
    sinks = torch.randn(HEADS) * SINK_SCALE
    scales = SimpleNamespace(_k_scale=torch.tensor(1.0), _v_scale=torch.tensor(1.0))
    layers, errors = {}, {}
    shapes = {name: (window, cap, sinks if sunk else None) for name, window, cap, sunk in LAYERS}
    for name, window, cap, sunk in LAYERS:
        # The engine's Attention passes sinks only to a layer that has them, as a keyword.
        extra = {"sinks": sinks} if sunk else {}
        try:
            layers[name] = module.TorchSDPABackendImpl(
                HEADS, SIZE, SIZE**-0.5, KV_HEADS, None, window, "auto", logits_soft_cap=cap, **extra
            )
        except Exception as exc:  # the engine's refusal of sinks
            for step_name, _, _ in steps():
                errors[f"{step_name}_{name}"] = type(exc).__name__
    if layout_too:
        layer = module.TorchSDPABackendImpl(HEADS, SIZE, SIZE**-0.5, KV_HEADS, None, WINDOW, "auto")
        layer.paged_attn_impl = module._PagedAttention
        layers["windowed_vllm_layout"] = layer
        shapes["windowed_vllm_layout"] = (WINDOW, None, None)
    caches = {name: torch.zeros(module.TorchSDPABackend.get_kv_cache_shape(8, BLOCK, KV_HEADS, SIZE)) for name in layers}
    for step_name, step, prompts in steps():
        meta = metadata(module, step, prompts)
        args = [torch.cat([t[seq][start:end] for seq, start, end in step]) for t in (q, k, v)]
        for name, layer in layers.items():
            want = torch.cat([reference(q[seq][start:end], k[seq][:end], v[seq][:end], *shapes[name]) for seq, start, end in step])
            try:
                got = layer.forward(scales, *(t.reshape(t.shape[0], -1) for t in args), caches[name], meta)
                errors[f"{step_name}_{name}"] = (got - want).abs().max().item()
            except Exception as exc:  # the engine's own refusal is the answer here
                errors[f"{step_name}_{name}"] = type(exc).__name__
    return errors


def main() -> None:
    payload = json.loads(sys.stdin.read())
    from vllm.v1.attention.backends import cpu_attn

    out = {"patched": run(cpu_attn, layout_too=True), "vanilla": None}
    if payload.get("upstream"):
        spec = importlib.util.spec_from_file_location("upstream_cpu_attn", payload["upstream"])
        vanilla = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vanilla)
        out["vanilla"] = run(vanilla, layout_too=False)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
