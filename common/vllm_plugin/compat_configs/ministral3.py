"""Ministral 3 (`ministral3`) for transformers 4.x, from transformers 5's Ministral3Config: a
Mistral decoder whose rope is yarn by default, stated in `rope_parameters`."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from transformers import PretrainedConfig

from ._rope import legacy_rope


class Ministral3Config(PretrainedConfig):
    model_type = "ministral3"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 131072,
        hidden_size: int = 4096,
        intermediate_size: int = 14336,
        num_hidden_layers: int = 34,
        num_attention_heads: int = 32,
        num_key_value_heads: Optional[int] = 8,
        head_dim: Optional[int] = 128,
        hidden_act: str = "silu",
        max_position_embeddings: int = 262144,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-5,
        use_cache: bool = True,
        pad_token_id: Optional[int] = 11,
        bos_token_id: Optional[int] = 1,
        eos_token_id: Union[int, List[int], None] = 2,
        tie_word_embeddings: bool = False,
        rope_parameters: Optional[Dict[str, Any]] = None,
        sliding_window: Optional[int] = None,
        attention_dropout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.head_dim = hidden_size // num_attention_heads if head_dim is None else head_dim
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.sliding_window = sliding_window
        self.attention_dropout = attention_dropout
        if rope_parameters is None:  # transformers 5's default: yarn over a 16k original window
            rope_parameters = {
                "type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 16.0,
                "original_max_position_embeddings": 16384,
                "max_position_embeddings": max_position_embeddings,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale_all_dim": 1.0,
                "mscale": 1.0,
                "llama_4_scaling_beta": 0.1,
            }
        self.rope_parameters = rope_parameters
        # The engine (transformers 4 era) reads these two, not rope_parameters.
        legacy = legacy_rope(rope_parameters)
        self.rope_theta, self.rope_scaling = float(legacy.get("rope_theta", 1000000.0)), legacy.get("rope_scaling")
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )
