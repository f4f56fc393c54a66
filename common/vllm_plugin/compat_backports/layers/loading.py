"""Loading a checkpoint into a backport, the same on every engine generation: q/k/v and gate/up
stacked as the engines' own models stack them, everything else through its parameter's own
loader (or the engine's default one). vLLM 0.5.5's backports (decoder.py) and the V1 engine's
(gemma4_v1.py) load through it; both engines' loaders hand a model the (name, tensor) pairs of
the checkpoint, and the V1 engine checks that every parameter was loaded against the names
returned.
"""

from typing import Callable, Iterable, Optional, Set, Tuple

import torch
from torch import nn
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.utils import is_pp_missing_parameter

# (engine parameter, checkpoint name, shard) of the projections the engine stacks into one matrix.
STACKED = (
    ("qkv_proj", "q_proj", "q"),
    ("qkv_proj", "k_proj", "k"),
    ("qkv_proj", "v_proj", "v"),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
)
Target = Callable[[str], Tuple[str, object]]


def stacked_target(name: str) -> Tuple[str, object]:
    """(engine parameter, shard) a checkpoint tensor loads into; shard None: a whole parameter.
    An MoE expert is a gated MLP too: `mlp.experts.3.gate_proj` stacks as the dense one does."""
    for param_name, weight_name, shard in STACKED:
        if weight_name in name:
            return name.replace(weight_name, param_name), shard
    return name, None


def load_checkpoint(
    model: nn.Module,
    weights: Iterable[Tuple[str, torch.Tensor]],
    target: Target = stacked_target,
    skip: Optional[Callable[[str], bool]] = None,
) -> Set[str]:
    """Load `weights` into `model`; the names of the parameters loaded. `skip`: checkpoint names
    the model does not load (a tied output matrix). A tensor with no parameter is an error (its
    numbers would be lost), but for GPTQ's extra biases (the engines' own qwen2.py skips them too)
    and the rotary tables some checkpoints store."""
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded: Set[str] = set()
    for name, tensor in weights:
        if "rotary_emb.inv_freq" in name or (skip is not None and skip(name)):
            continue
        name, shard = target(name)
        if is_pp_missing_parameter(name, model):
            continue  # a layer another pipeline rank holds
        if name not in params:
            if name.endswith(".bias"):
                continue
            raise KeyError(f"backport: checkpoint tensor {name} has no parameter in the model")
        param = params[name]
        if shard is None:
            getattr(param, "weight_loader", default_weight_loader)(param, tensor)
        else:
            param.weight_loader(param, tensor, shard)
        loaded.add(name)
    return loaded
