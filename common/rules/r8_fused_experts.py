"""R8: the MoE experts are stored fused, the way transformers 5 holds them in memory.

transformers 5 keeps an MoE layer's experts as two 3-D tensors, `mlp.experts.gate_up_proj` and
`mlp.experts.down_proj`, and checkpoints saved with `save_original_format=False` (and MoE models
released after v5) store them so, instead of one weight per expert under the names transformers 4
used. An engine that looks those names up dies (vLLM 0.11.0: `KeyError: 'layers.0.mlp.experts.
down_proj'`; vLLM 0.32 on a fused Mixtral: `There is no module or parameter named 'layers.0.mlp'`)
or, where its loader skips names it does not know, serves random experts. The check reads the
tensor names from model.safetensors.index.json (or the safetensors headers: their 8-byte length
and JSON only, never weights), and only for the model types transformers 5 converts this way. On an
engine that runs `vllm.general_plugins` entry points, the repair puts the image's plugin directory
first on PYTHONPATH and names the layout in COMPAT_FUSED_EXPERTS: the plugin (shared with R9) wraps
the engine's weight iterator and splits every fused tensor back into the per-expert tensors transformers 5
writes with `save_original_format=True`, which the engine's own loader reads. Elsewhere the
finding is an error: the model would not load, or load wrong weights.
"""

from __future__ import annotations

# Only the model-type table at import: the header reader and the plugin's wrapper are imported
# past the model-type test (check), so a model of any other type pays nothing for them.
from ..vllm_plugin.compat_fused_experts import ENV, MODEL_TYPES, fused_part
from ..model.json_numbers import positive_int
from .support.base import Context, Outcome, Rule

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple

# A checkpoint without an index is one file, or a handful: more headers than this are not read.
MAX_HEADER_FILES = 64
# config.json keys that hold the number of routed experts, by model family.
EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
EXPERTS = ".experts."


def expert_count(config: Dict) -> Optional[int]:
    for key in EXPERT_COUNT_KEYS:
        value = config.get(key)
        if positive_int(value) is not None:
            return value
    return None


def stacked_unknown(name: str) -> bool:
    """A tensor stacked over the experts that the plugin does not split (a fused bias, a
    quantization scale): `.experts.<not a number>` other than the two fused names."""
    head, sep, tail = name.rpartition(EXPERTS)
    return bool(sep) and not tail.split(".", 1)[0].isdigit() and not fused_part(name)[1]


def tensor_shapes(ctx: Context) -> Tuple[Dict[str, Optional[List[int]]], str, List[str]]:
    """(tensor name -> shape or None when not read, where the names came from, problems).

    With an index the names are its weight_map; the header of the file holding the first fused
    tensor then confirms that tensor's shape (one header, however many shards). Without one, the
    headers of the top-level *.safetensors files."""
    from ..model.safetensors_header import INDEX, read_header, weight_files, weight_map

    mapping, problem = weight_map(ctx.model)
    problems = [problem.message()] if problem is not None else []
    if mapping is not None:
        shapes: Dict[str, Optional[List[int]]] = {name: None for name in mapping}
        fused = sorted(name for name in mapping if fused_part(name)[1])
        if fused:
            header, bad = read_header(ctx.model, mapping[fused[0]])
            if header is not None:
                shapes.update({k: v for k, v in header.shapes.items() if k in shapes})
            elif bad is not None:
                problems.append(bad.message())
        return shapes, INDEX, problems
    files = weight_files(ctx.model)
    shapes = {}
    for name in files[:MAX_HEADER_FILES]:
        header, bad = read_header(ctx.model, name)
        if header is not None:
            shapes.update(header.shapes)
        elif bad is not None:
            problems.append(bad.message())
    where = "the safetensors headers" if files else "no *.safetensors file"
    return shapes, where, problems


def bad_shapes(shapes: Dict[str, Optional[List[int]]], fused: List[str], experts: Optional[int]) -> List[str]:
    """Fused tensors whose shape (where read) is not [experts, rows, columns], gate_up's rows even."""
    bad = []
    for name in fused:
        shape = shapes.get(name)
        if shape is None:
            continue
        if len(shape) != 3 or (experts is not None and shape[0] != experts) or (name.endswith("gate_up_proj") and shape[1] % 2):
            bad.append(f"{name} {shape}")
    return bad


class FusedExperts(Rule):
    code = "R8"

    def check(self, ctx: Context) -> Outcome:
        outcome = Outcome()
        config = ctx.model.json_object("config.json")
        model_type = config.get("model_type")
        layout = MODEL_TYPES.get(model_type) if isinstance(model_type, str) else None
        if layout is None:
            return outcome  # not an MoE transformers 5 converts: nothing is read
        shapes, where, problems = tensor_shapes(ctx)
        for problem in problems:
            outcome.findings.append(self.finding("warning", f"cannot tell whether the experts are stored fused: {problem}"))
        fused = sorted(name for name in shapes if fused_part(name)[1])
        if not fused:
            return outcome
        experts = expert_count(config)
        detail = f"{len(fused)} fused expert tensors in {where} (e.g. {fused[0]}), {model_type} layout"
        unknown = sorted(name for name in shapes if stacked_unknown(name))
        if unknown:
            outcome.findings.append(
                self.finding("error", f"{detail}, and stacked expert tensors the plugin cannot split: {', '.join(unknown[:3])}")
            )
            return outcome
        wrong = bad_shapes(shapes, fused, experts)
        if wrong:
            outcome.findings.append(
                self.finding("error", f"{detail}, but not in transformers 5's shape ({', '.join(wrong[:3])}; {experts} experts)")
            )
            return outcome
        from ..vllm_plugin.compat_plugin import PLUGIN_NAME
        from .support.plugin import blocker, plugin_repair

        blocked = blocker(ctx)
        if blocked is not None:
            severity, why = blocked
            consequence = {"error": ", so it would fail to load them or load wrong expert weights", "unverified": ""}[severity]
            outcome.findings.append(self.finding(severity, f"{detail}: {why}{consequence}"))
            return outcome
        detail = f"{detail}; {PLUGIN_NAME} splits them per expert at load"
        outcome.repairs.append(plugin_repair(self.code, self.title, detail, ENV, layout))
        return outcome


RULE = FusedExperts()
