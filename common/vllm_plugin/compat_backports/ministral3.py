"""Ministral 3 (`Ministral3ForCausalLM`, Devstral Small 2's text model) for the vLLM 0.5.5
generation, on the shared decoder (layers/decoder.py), and its vision-language wrapper
`Mistral3ForConditionalGeneration` (how Ministral 3 and Devstral Small 2 are published) served as
text.

transformers 5's modeling_ministral3.py is the Mistral layout (no biases, no q/k norms, an
explicit head_dim) with two differences, both in yarn.py: its YaRN scales cos and sin by
mscale/mscale_all_dim's ratio, which the engine's yarn rotary is handed as attn_factor; and each
query is scaled by its position after the rotary embedding. Its attention applies the config's
`sliding_window` to every layer; vLLM 0.5.5 serves such a model-wide window wrong (the
mistral-window conformance cell) and no published Ministral 3 has one, so a config with a window
is refused. The rope parameters are the ones the engine's config holds (yarn.rope_parameters).
The V1 engine's backport is ministral3_v1.py.

The wrapper builds only the text model: this engine has no Pixtral tower, so image requests are
not served; the checkpoint's text tensors are renamed onto it and the vision tower's and
projector's skipped (text_of_vlm.py), counted in one log line.
"""

import copy
from typing import Any, Dict, Optional, Tuple

import torch
from vllm.config import CacheConfig
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from .layers.decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer, DecoderModel
from .layers.text_of_vlm import ServedAsText, tied_by_wrapper
from .layers.yarn import engine_rope_scaling, query_scale, rope_parameters, scaled_queries


class Ministral3Attention(DecoderAttention):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        super().__init__(config, cache_config, quant_config, qk_norm=False)
        self.query_scale = query_scale(rope_parameters(config), config.max_position_embeddings)

    def rope_scaling(self, config) -> Optional[dict]:
        return engine_rope_scaling(rope_parameters(config), config.max_position_embeddings)

    def rotate(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        q, k = super().rotate(positions, q, k)
        return (q, k) if self.query_scale is None else (scaled_queries(positions, q, *self.query_scale), k)


class Ministral3Model(DecoderModel):
    def __init__(self, config, cache_config: Optional[CacheConfig] = None, quant_config: Optional[QuantizationConfig] = None) -> None:
        def layer(prefix: str) -> DecoderLayer:
            attention = Ministral3Attention(config, cache_config, quant_config)
            return DecoderLayer(config, cache_config, quant_config, attention=attention)

        super().__init__(config, cache_config, quant_config, layer_fn=layer)


class Ministral3ForCausalLM(DecoderForCausalLM):
    model_cls = Ministral3Model

    @staticmethod
    def check_config(config) -> None:
        window = getattr(config, "sliding_window", None)
        if window is not None:
            raise ValueError(f"Ministral 3 backport: a sliding window ({window}) on every layer is not supported on this engine")


class Mistral3ForConditionalGeneration(ServedAsText, Ministral3ForCausalLM):
    """Ministral 3 and Devstral Small 2 as published: the text model of the wrapper."""

    def text_config(self, config: Any) -> Any:
        text = copy.copy(config.text_config)
        # transformers 5 ties the output matrix to the embeddings by the wrapper's flag (True
        # unless stated), and unties a pair the checkpoint holds both of: built untied unless both
        # configs tie, the embeddings stand in for an output matrix the checkpoint lacks.
        self.wrapper_ties = tied_by_wrapper(config, unstated=True)
        text.tie_word_embeddings = self.wrapper_ties and bool(text.tie_word_embeddings)
        return text

    def text_loaded(self, seen: Dict[str, Any]) -> None:
        if not self.ties_embeddings and self.wrapper_ties and not seen["lm_head"] and seen["embedding"] is not None:
            super().load_weights([("lm_head.weight", seen["embedding"])])
