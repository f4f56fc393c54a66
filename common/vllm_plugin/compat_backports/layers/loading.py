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

from .stacking import target as stacked_target  # what the engines stack, by checkpoint name

Target = Callable[[str], Tuple[str, object]]


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
