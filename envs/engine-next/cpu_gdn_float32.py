"""Let this venv's vLLM 0.32 (the CPU build standing in for nv-a100@next's engine) run the Gated
DeltaNet layers of Qwen3-Next and Qwen3.5 in float32, as the card's engine runs them.

A harness patch of the CPU stand-in, never of an image's code on a card's base: on the card, vLLM's
Triton kernels (causal_conv1d, FLA's chunk_gated_delta_rule and fused recurrent update) compute
these layers in the model's dtype, float32 included. The CPU build's own kernels for them are
BF16-only, and vllm/model_executor/layers/mamba/ops/cpu/gdn_attention.py asserts "CPU GDN attention
requires BF16.": a float32 start (every conformance cell's, `--dtype float32`) crashes at its first
request. The edit below hands a layer whose input is not BF16 to a torch stand-in with the same
math, installed beside that module:
  compat_gated_delta.py   the arithmetic: the 0.5.5 backport's own Gated DeltaNet
                          (common/vllm_plugin/compat_backports/layers/gated_delta.py, tested against
                          transformers' reference), copied as it is; its sha256 is pinned below,
                          because this venv is rebuilt (and the 0.32 cells go stale) only when this
                          folder changes: a new gated_delta.py must be pinned here again
                          (tests/unit/test_cpu_gdn_float32.py fails until it is)
  compat_gdn_float32.py   gdn_float32_stand_in.py: vLLM's caches and metadata around that arithmetic
BF16 keeps the CPU build's kernels. The edit is anchored on the exact text of 0.32.0's file and must
match exactly once; running it again is a no-op (an applied edit is recognised by its text), and
the two modules are written again each time.

usage: python cpu_gdn_float32.py   (with the venv's python: it finds vLLM without importing it;
tests/unit/test_cpu_gdn_float32.py applies it to the 0.32.0 sdist's own file)
"""

import hashlib
import sys
from pathlib import Path
from typing import List

# envs/: the applier every harness patch shares (source_edits.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from source_edits import apply_edits, replace_file, run  # noqa: E402

HERE = Path(__file__).resolve().parent
GATED_DELTA = HERE.parents[1] / "common" / "vllm_plugin" / "compat_backports" / "layers" / "gated_delta.py"
GATED_DELTA_SHA256 = "2bfd952a1472bcbf1137e3446d4d726b544b4e1e935fc070270ea7be5e612b45"
STAND_IN = HERE / "gdn_float32_stand_in.py"
CPU_OPS = "model_executor/layers/mamba/ops/cpu"
TARGET = f"{CPU_OPS}/gdn_attention.py"
MODULES = {f"{CPU_OPS}/compat_gated_delta.py": GATED_DELTA, f"{CPU_OPS}/compat_gdn_float32.py": STAND_IN}

OLD = '    assert mixed_qkv.dtype == torch.bfloat16, "CPU GDN attention requires BF16."\n'
NEW = (
    "    if mixed_qkv.dtype != torch.bfloat16:  # enginex-compat: float32 GDN stand-in (CPU build only)\n"
    "        from vllm.model_executor.layers.mamba.ops.cpu.compat_gdn_float32 import forward\n"
    "\n"
    "        forward(layer, attn_metadata_i, mixed_qkv, b, a, core_attn_out)\n"
    "        return\n" + OLD
)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def apply(root: Path) -> List[str]:
    """Edit the vLLM package at `root` and write the stand-in's modules into it; what was done.
    Raises ValueError, before any file is written, when the anchor is not found exactly once
    (another vLLM than 0.32.0) or gated_delta.py is not the one pinned."""
    found = sha256_of(GATED_DELTA)
    if found != GATED_DELTA_SHA256:
        raise ValueError(f"{GATED_DELTA} is not the one pinned here (sha256 {found}): pin it in {Path(__file__).name} (GATED_DELTA_SHA256)")
    done = apply_edits(root, [(TARGET, OLD, NEW)], "0.32.0")
    for rel, source in MODULES.items():
        replace_file(root / rel, source.read_text())
        done.append(f"{rel} written")
    return done


if __name__ == "__main__":
    sys.exit(run("cpu gdn float32", apply))
