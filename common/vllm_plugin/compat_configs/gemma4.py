"""Gemma 4 (`gemma4`, text part `gemma4_text`) for transformers 4.x, from transformers 5's
Gemma4Config/Gemma4TextConfig: sliding-window layers with a full-attention layer every 6th (the
last always full), each kind with its own rope (`rope_parameters` keyed by layer type, read as
4.x's Gemma 3 names: `rope_theta` global, `rope_local_base_freq` sliding), and full-attention
layers with a wider head (`per_layer_config`)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from transformers import PretrainedConfig

from ._rope import legacy_rope, text_sub_config


class Gemma4TextConfig(PretrainedConfig):
    model_type = "gemma4_text"
    base_config_key = "text_config"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 262144,
        hidden_size: int = 2304,
        intermediate_size: int = 9216,
        num_hidden_layers: int = 30,
        num_attention_heads: int = 8,
        num_key_value_heads: int = 4,
        head_dim: int = 256,
        hidden_activation: str = "gelu_pytorch_tanh",
        max_position_embeddings: int = 131072,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        pad_token_id: Optional[int] = 0,
        eos_token_id: Union[int, List[int], None] = 1,
        bos_token_id: Optional[int] = 2,
        tie_word_embeddings: bool = True,
        rope_parameters: Optional[Dict[str, Dict[str, Any]]] = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        sliding_window: int = 512,
        layer_types: Optional[List[str]] = None,
        final_logit_softcapping: Optional[float] = None,
        use_bidirectional_attention: Optional[str] = None,
        vocab_size_per_layer_input: int = 262144,
        hidden_size_per_layer_input: int = 256,
        attention_k_eq_v: bool = False,
        num_kv_shared_layers: int = 0,
        enable_moe_block: bool = False,
        use_double_wide_mlp: bool = False,
        num_experts: Optional[int] = None,
        top_k_experts: Optional[int] = None,
        moe_intermediate_size: Optional[int] = None,
        global_head_dim: int = 512,
        num_global_key_value_heads: Optional[int] = None,
        per_layer_config: Optional[Dict[Any, Dict[str, Any]]] = None,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.head_dim = head_dim
        self.hidden_activation = hidden_activation
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.final_logit_softcapping = final_logit_softcapping
        self.use_bidirectional_attention = use_bidirectional_attention
        self.vocab_size_per_layer_input = vocab_size_per_layer_input
        self.hidden_size_per_layer_input = hidden_size_per_layer_input
        self.attention_k_eq_v = attention_k_eq_v
        self.num_kv_shared_layers = num_kv_shared_layers
        self.enable_moe_block = enable_moe_block
        self.use_double_wide_mlp = use_double_wide_mlp
        self.num_experts = num_experts
        self.top_k_experts = top_k_experts
        self.moe_intermediate_size = moe_intermediate_size
        # 5.x keeps the exclusive bound in memory for fully bidirectional models and saves the
        # window back in to_dict: the same here, so a read value equals 5.x's.
        if use_bidirectional_attention == "all":
            self.is_causal = False
            sliding_window = sliding_window // 2 + 1
        self.sliding_window = sliding_window
        if layer_types is None:  # 5.x: five sliding layers, then one full
            layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(num_hidden_layers)]
        if layer_types:
            layer_types = list(layer_types[:-1]) + ["full_attention"]  # 5.x forces the last layer full
        self.layer_types = layer_types
        if rope_parameters is None:
            rope_parameters = {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
            }
        self.rope_parameters = rope_parameters
        # 4.x's Gemma 3 names: the global theta and the sliding layers' own. The full layers'
        # "proportional" rope has no 4.x rope_scaling type: it stays in rope_parameters only.
        self.rope_theta = float(legacy_rope(rope_parameters.get("full_attention")).get("rope_theta", 1000000.0))
        self.rope_local_base_freq = float(legacy_rope(rope_parameters.get("sliding_attention")).get("rope_theta", 10000.0))
        self.rope_scaling = None
        if per_layer_config is None:  # 5.x: the full-attention layers' wider head (and kv heads)
            overrides: Dict[str, Any] = {"head_dim": global_head_dim}
            if num_global_key_value_heads is not None and attention_k_eq_v:
                overrides["num_key_value_heads"] = num_global_key_value_heads
            per_layer_config = {i: dict(overrides) for i, kind in enumerate(layer_types) if kind == "full_attention"}
        self.per_layer_config = per_layer_config
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    def to_dict(self) -> Dict[str, Any]:
        output = super().to_dict()
        if getattr(self, "use_bidirectional_attention", None) == "all":
            output["sliding_window"] = (self.sliding_window - 1) * 2
        return output


class Gemma4Config(PretrainedConfig):
    """The multimodal config: its text part is a Gemma4TextConfig; the vision and audio parts stay
    the dicts they were saved as (no engine of transformers 4 builds those towers)."""

    model_type = "gemma4"
    sub_configs = {"text_config": Gemma4TextConfig}
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        text_config: Any = None,
        vision_config: Optional[Dict[str, Any]] = None,
        audio_config: Optional[Dict[str, Any]] = None,
        boi_token_id: Optional[int] = 255999,
        eoi_token_id: Optional[int] = 258882,
        image_token_id: Optional[int] = 258880,
        video_token_id: Optional[int] = 258884,
        boa_token_id: Optional[int] = 256000,
        eoa_token_index: Optional[int] = 258883,
        audio_token_id: Optional[int] = 258881,
        initializer_range: float = 0.02,
        tie_word_embeddings: bool = True,
        **kwargs: Any,
    ) -> None:
        self.text_config = text_sub_config(text_config, Gemma4TextConfig)
        self.vision_config = vision_config
        self.audio_config = audio_config
        self.boi_token_id = boi_token_id
        self.eoi_token_id = eoi_token_id
        self.image_token_id = image_token_id
        self.video_token_id = video_token_id
        self.boa_token_id = boa_token_id
        self.eoa_token_index = eoa_token_index
        self.audio_token_id = audio_token_id
        self.initializer_range = initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
