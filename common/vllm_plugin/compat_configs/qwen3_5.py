"""Qwen3.5 (`qwen3_5`, text part `qwen3_5_text`; the MoE `qwen3_5_moe`, `qwen3_5_moe_text`) for
transformers 4.x, from transformers 5's Qwen3_5(Moe)Config/Qwen3_5(Moe)TextConfig: a hybrid decoder
(`layer_types`: linear attention, with full attention every 4th layer by default) whose rope
rotates a quarter of each head; the MoE's every layer has routed experts and a gated shared one."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from transformers import PretrainedConfig

from ._rope import legacy_rope, text_sub_config


class Qwen3_5TextConfig(PretrainedConfig):
    model_type = "qwen3_5_text"
    base_config_key = "text_config"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 248320,
        hidden_size: int = 4096,
        intermediate_size: int = 12288,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 16,
        num_key_value_heads: int = 4,
        hidden_act: str = "silu",
        max_position_embeddings: int = 32768,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_parameters: Optional[Dict[str, Any]] = None,
        attention_bias: bool = False,
        attention_dropout: float = 0.0,
        head_dim: int = 256,
        linear_conv_kernel_dim: int = 4,
        linear_key_head_dim: int = 128,
        linear_value_head_dim: int = 128,
        linear_num_key_heads: int = 16,
        linear_num_value_heads: int = 32,
        layer_types: Optional[List[str]] = None,
        pad_token_id: Optional[int] = None,
        bos_token_id: Optional[int] = None,
        eos_token_id: Union[int, List[int], None] = None,
        full_attention_interval: int = 4,
        partial_rotary_factor: float = 0.25,
        **kwargs: Any,
    ) -> None:
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.attention_bias = attention_bias
        self.attention_dropout = attention_dropout
        self.head_dim = head_dim
        self.linear_conv_kernel_dim = linear_conv_kernel_dim
        self.linear_key_head_dim = linear_key_head_dim
        self.linear_value_head_dim = linear_value_head_dim
        self.linear_num_key_heads = linear_num_key_heads
        self.linear_num_value_heads = linear_num_value_heads
        if layer_types is None:  # 5.x: every `full_attention_interval`-th layer attends fully
            layer_types = [
                "full_attention" if (i + 1) % full_attention_interval == 0 else "linear_attention" for i in range(num_hidden_layers)
            ]
        self.layer_types = layer_types
        if rope_parameters is None:
            rope_parameters = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": partial_rotary_factor}
        self.rope_parameters = rope_parameters
        # 5.x keeps the rotated fraction in rope_parameters; 4.x models read it from the config.
        self.partial_rotary_factor = rope_parameters.get("partial_rotary_factor", partial_rotary_factor)
        legacy = legacy_rope(rope_parameters)
        self.rope_theta, self.rope_scaling = float(legacy.get("rope_theta", 10000.0)), legacy.get("rope_scaling")
        super().__init__(
            pad_token_id=pad_token_id,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
            **kwargs,
        )

    @property
    def layers_block_type(self) -> List[str]:
        """vLLM 0.5.5's name for the layer kinds (Jamba's): "attention" layers get a paged KV
        cache; any other kind is sequence-length agnostic, and a model with one is handed its
        requests by the model runner to keep their state (compat_backports/qwen3_5.py)."""
        return ["attention" if t == "full_attention" else t for t in self.layer_types]


class Qwen3_5Config(PretrainedConfig):
    """The multimodal config: its text part is a Qwen3_5TextConfig; the vision part stays the
    dict it was saved as (no engine of transformers 4 builds its tower)."""

    model_type = "qwen3_5"
    sub_configs = {"text_config": Qwen3_5TextConfig}
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        text_config: Any = None,
        vision_config: Optional[Dict[str, Any]] = None,
        image_token_id: int = 248056,
        video_token_id: int = 248057,
        vision_start_token_id: int = 248053,
        vision_end_token_id: int = 248054,
        tie_word_embeddings: bool = False,
        **kwargs: Any,
    ) -> None:
        self.text_config = text_sub_config(text_config, self.sub_configs["text_config"])
        self.vision_config = vision_config
        self.image_token_id = image_token_id
        self.video_token_id = video_token_id
        self.vision_start_token_id = vision_start_token_id
        self.vision_end_token_id = vision_end_token_id
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    @property
    def layers_block_type(self) -> List[str]:
        return self.text_config.layers_block_type


class Qwen3_5MoeTextConfig(Qwen3_5TextConfig):
    """The dense text config with the expert block's sizes (every layer is sparse: routed experts
    of `moe_intermediate_size`, top `num_experts_per_tok` renormalised, and a shared expert of
    `shared_expert_intermediate_size` scaled by a sigmoid gate). transformers 5's defaults."""

    model_type = "qwen3_5_moe_text"

    def __init__(
        self,
        vocab_size: int = 248320,
        hidden_size: int = 2048,
        num_hidden_layers: int = 40,
        num_attention_heads: int = 16,
        num_key_value_heads: int = 2,
        moe_intermediate_size: int = 512,
        shared_expert_intermediate_size: int = 512,
        num_experts_per_tok: int = 8,
        num_experts: int = 256,
        output_router_logits: bool = False,
        router_aux_loss_coef: float = 0.001,
        **kwargs: Any,
    ) -> None:
        self.moe_intermediate_size = moe_intermediate_size
        self.shared_expert_intermediate_size = shared_expert_intermediate_size
        self.num_experts_per_tok = num_experts_per_tok
        self.num_experts = num_experts
        self.output_router_logits = output_router_logits
        self.router_aux_loss_coef = router_aux_loss_coef
        kwargs.pop("intermediate_size", None)  # the MoE has no dense MLP
        super().__init__(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            num_key_value_heads=num_key_value_heads,
            **kwargs,
        )


class Qwen3_5MoeConfig(Qwen3_5Config):
    model_type = "qwen3_5_moe"
    sub_configs = {"text_config": Qwen3_5MoeTextConfig}
