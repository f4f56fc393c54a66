"""Each expert's checkpoint tensors (`mlp.experts.{e}.gate_proj` / `up_proj` / `down_proj`) loaded
into the engine's FusedMoE layer, whose loader stacks them into its fused weights: the same call on
vLLM 0.5.5 and on the V1 engine (FusedMoE.make_expert_params_mapping and the layer's
weight_loader(param, tensor, name, shard_id=, expert_id=)). The Qwen3-MoE and Qwen3.5-MoE
backports of both generations load their experts here; transformers 5's fused experts arrive
split by R8's plugin under these names."""

from typing import Iterable, Iterator, Optional, Set, Tuple

import torch
from torch import nn
from vllm.model_executor.layers.fused_moe import FusedMoE
from vllm.model_executor.models.utils import is_pp_missing_parameter


def expert_tensors(
    model: nn.Module, num_experts: int, weights: Iterable[Tuple[str, torch.Tensor]], loaded: Optional[Set[str]] = None
) -> Iterator[Tuple[str, torch.Tensor]]:
    """Loads each expert's tensor into the FusedMoE layers' stacked weights of `model` (their
    parameter names added to `loaded`, where given); yields every other tensor, for the dense loader."""
    mapping = FusedMoE.make_expert_params_mapping(
        ckpt_gate_proj_name="gate_proj",
        ckpt_down_proj_name="down_proj",
        ckpt_up_proj_name="up_proj",
        num_experts=num_experts,
    )
    params = dict(model.named_parameters())
    for name, tensor in weights:
        expert = next((m for m in mapping if m[1] in name), None) if ".mlp.experts." in name else None
        if expert is None:
            yield name, tensor
            continue
        param_name, weight_name, expert_id, shard_id = expert
        name = name.replace(weight_name, param_name)
        if is_pp_missing_parameter(name, model):
            continue
        param = params[name]
        param.weight_loader(param, tensor, name, shard_id=shard_id, expert_id=expert_id)
        if loaded is not None:
            loaded.add(name)
