"""The projections every engine generation stacks into one matrix, by the names checkpoints store
them under: the attention's q, k and v (QKVParallelLinear's shards "q", "k", "v") and a gated
MLP's gate and up (MergedColumnParallelLinear's shards 0 and 1). vLLM 0.5.5's models and the V1
engine's load them alike; the backports of both (layers/decoder.py, qwen3_5_v1.py) read this
table, a family adding its own rows. Standard library only."""

from __future__ import annotations

from typing import Any, Sequence, Tuple

# (engine parameter, checkpoint name, shard)
STACKED: Tuple[Tuple[str, str, Any], ...] = (
    ("qkv_proj", "q_proj", "q"),
    ("qkv_proj", "k_proj", "k"),
    ("qkv_proj", "v_proj", "v"),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)


def target(name: str, stacked: Sequence[Tuple[str, str, Any]] = STACKED) -> Tuple[str, Any]:
    """(engine parameter, shard) a checkpoint tensor loads into; shard None: a whole parameter.
    An MoE expert is a gated MLP too: `mlp.experts.3.gate_proj` stacks as the dense one does."""
    for param_name, weight_name, shard in stacked:
        if weight_name in name:
            return name.replace(weight_name, param_name), shard
    return name, None
