"""R8's tables and split: MoE experts stored fused (transformers 5) turned back into per-expert weights.

transformers 5 holds an MoE layer's experts as two 3-D tensors, `mlp.experts.gate_up_proj`
[experts, 2 * intermediate, hidden] (each expert's gate rows, then its up rows) and
`mlp.experts.down_proj` [experts, hidden, intermediate], and a checkpoint saved with
`save_original_format=False` (or an MoE released after v5) stores them so. Older vLLMs look for
one weight per expert under the names transformers 4 saved (Mixtral: `block_sparse_moe.experts.
{e}.w1.weight`) and die with a KeyError. `split` turns each fused tensor back into exactly the
tensors transformers 5 writes with `save_original_format=True`: the inverse of its conversion
mapping (transformers/conversion_mapping.py: MergeModulelist(dim=0) stacks the experts,
Concatenate(dim=1) puts gate before up; no transposition), so the engine's own loader does the rest.

The plugin (compat_plugin.py) applies it in the engine's weight iterator when COMPAT_FUSED_EXPERTS
names a layout; the preflight's R8 imports the tables. Standard library only: the engine's tensors
are handled through their own methods, so importing this module never imports torch.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Iterator, List, Tuple

ENV = "COMPAT_FUSED_EXPERTS"

# The names transformers 5 gives an MoE block's stacked expert tensors (the part after ".experts.").
FUSED_NAMES = ("gate_up_proj", "down_proj")

# Per conversion pattern of transformers 5: (renames from the new name to the original one, and the
# original per-expert names of the gate, up and down projections). Each is the inverse of the
# pattern of the same name in transformers' conversion_mapping.py.
LAYOUTS = {
    # WeightRenaming(".block_sparse_moe.", ".mlp."); experts.*.w1/w3 -> gate_up_proj, w2 -> down_proj
    "mixtral": (((".mlp.", ".block_sparse_moe."),), ("w1", "w3", "w2")),
    # mlp.experts.*.gate_proj/up_proj -> gate_up_proj, down_proj -> down_proj
    "qwen2_moe": ((), ("gate_proj", "up_proj", "down_proj")),
}

# model_type -> layout: the text MoE models transformers 5 (5.24's _MODEL_TO_CONVERSION_PATTERN)
# converts with one of the patterns above and nothing else. A model type not listed here keeps
# its own format on disk (gpt_oss and llama4 store fused experts natively), so R8 leaves it alone.
MODEL_TYPES = {
    "mixtral": "mixtral",
    "minimax": "mixtral",
    "qwen2_moe": "qwen2_moe",
    "qwen3_moe": "qwen2_moe",
    "olmoe": "qwen2_moe",
    "flex_olmo": "qwen2_moe",
    "deepseek_v2": "qwen2_moe",
    "deepseek_v3": "qwen2_moe",
    "dots1": "qwen2_moe",
    "glm4_moe": "qwen2_moe",
    "hunyuan_v1_moe": "qwen2_moe",
    "ernie4_5_moe": "qwen2_moe",
}


def rename(name: str, layout: str) -> str:
    """`name` as transformers 4 saved it (the layout's renames, in order)."""
    for new, old in LAYOUTS[layout][0]:
        name = name.replace(new, old)
    return name


def fused_part(name: str) -> Tuple[str, str]:
    """(module prefix, fused name) of a stacked expert tensor, or ("", "") for any other name."""
    head, sep, tail = name.rpartition(".experts.")
    return (head, tail) if sep and tail in FUSED_NAMES else ("", "")


def expert_names(name: str, layout: str, experts: int) -> List[str]:
    """The per-expert names one tensor called `name` becomes, in the order `split` yields them:
    for gate_up_proj each expert's gate then up; for down_proj each expert's down; any other
    tensor keeps its (renamed) name."""
    renamed = rename(name, layout)
    head, fused = fused_part(renamed)
    if not fused:
        return [renamed]
    gate, up, down = LAYOUTS[layout][1]
    parts = (gate, up) if fused == "gate_up_proj" else (down,)
    return [f"{head}.experts.{e}.{part}.weight" for e in range(experts) for part in parts]


def split(name: str, tensor: Any, layout: str) -> Iterator[Tuple[str, Any]]:
    """The original-format tensors of one checkpoint tensor (views of it; nothing is copied)."""
    fused = fused_part(rename(name, layout))[1]
    if not fused:
        yield rename(name, layout), tensor
        return
    shape = tuple(tensor.shape)
    if len(shape) != 3 or (fused == "gate_up_proj" and shape[1] % 2):
        # Loading it anyway would put wrong numbers in the experts: stop the start with the reason.
        raise ValueError(
            f"fused expert tensor {name} has shape {list(shape)}, not the [experts, 2*intermediate, hidden] / "
            f"[experts, hidden, intermediate] of transformers 5's {layout} layout; not loaded"
        )
    names = expert_names(name, layout, shape[0])
    if fused == "gate_up_proj":
        gate, up = tensor.chunk(2, dim=1)
        pieces = [piece[e] for e in range(shape[0]) for piece in (gate, up)]
    else:
        pieces = [tensor[e] for e in range(shape[0])]
    for new_name, piece in zip(names, pieces, strict=True):
        yield new_name, piece.contiguous()
