"""What Qwen3.5's backports check of its config and skip of its checkpoint, on either engine
generation (qwen3_5.py on vLLM 0.5.5's model API, qwen3_5_v1.py on the V1 engine's): a hybrid
decoder whose `layer_types` name each layer's token mixer, Gated DeltaNet ("linear_attention")
or gated full attention ("full_attention").

- Under tensor parallelism each rank holds whole heads: its share of the linear-attention key
  heads with the value heads they serve (value head j belongs to key head j // (values / keys)),
  so both counts must split over the ranks.
- The DeltaNet layers' convolution and gating are SiLU (the engines' kernels and the author's
  alike); another `hidden_act` is refused, never served as SiLU.
- The published checkpoints carry a multi-token-prediction head (`mtp.*`) for speculative
  decoding, which neither backport serves: its tensors are skipped and counted in the log.

Standard library only: the preflight's tests import it without torch or vLLM.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Iterator, List, Tuple

from .windows import FULL

LINEAR = "linear_attention"
MTP = "mtp."
# What both generations' backports say of pipeline parallelism, which no cell has run.
NO_PIPELINE = "Qwen3.5 backport: pipeline parallelism is not supported yet (start it on one pipeline stage)"

logger = logging.getLogger("vllm.compat_backports.qwen3_5")


def layer_types(config: Any) -> List[str]:
    """Each layer's token mixer; ValueError where `layer_types` does not describe every layer
    with the two kinds."""
    types = list(config.layer_types)
    unknown = sorted(set(types) - {LINEAR, FULL})
    if len(types) != config.num_hidden_layers or unknown:
        raise ValueError(f"Qwen3.5 backport: layer_types {unknown or len(types)} do not describe {config.num_hidden_layers} layers")
    return types


def linear_heads(config: Any, ranks: int) -> Tuple[int, int]:
    """(key heads, value heads) of one rank's Gated DeltaNet layers; ValueError where they do not
    split over the ranks or the value heads do not group over the key heads."""
    keys, values = config.linear_num_key_heads, config.linear_num_value_heads
    if values % keys:
        raise ValueError(f"Qwen3.5 backport: {values} value heads do not group over {keys} key heads")
    if keys % ranks:
        raise ValueError(f"Qwen3.5 backport: {keys} linear-attention key heads do not split over {ranks} ranks")
    return keys // ranks, values // ranks


def check_activation(config: Any) -> None:
    if config.hidden_act != "silu":
        raise ValueError(f"Qwen3.5 backport: activation {config.hidden_act!r}; the Gated DeltaNet layers use SiLU")


def without_mtp(weights: Iterable[Tuple[str, Any]]) -> Iterator[Tuple[str, Any]]:
    """The checkpoint's tensors but the multi-token-prediction head's, whose count is logged."""
    skipped = 0
    for name, tensor in weights:
        if name.startswith(MTP):
            skipped += 1
        else:
            yield name, tensor
    if skipped:
        logger.info("Qwen3.5 backport: %d multi-token-prediction tensors (mtp.*) not loaded", skipped)
