"""The engine-next venv's float32 Gated DeltaNet harness patch (envs/engine-next/cpu_gdn_float32.py)
on the real upstream vLLM 0.32.0 file: the edit lands exactly once and hands a non-BF16 input to the
stand-in before the CPU build's BF16 assert, again is a no-op, the stand-in's modules are written
beside it, and another vLLM's file (or an arithmetic other than the one pinned) is refused before
anything is written. That the patched engine serves the author's tokens in float32 is the
conformance matrix's 0.32 cells of Qwen3-Next, Qwen3.5 and Qwen3.5-MoE."""

import ast
from functools import partial
import hashlib
from pathlib import Path

import pytest

from tests.unit import harness_patch_files

from common.tests.helpers import ROOT

UPSTREAM = ROOT / ".upstream" / "vllm-0_32_0" / "vllm"
TARGET = "model_executor/layers/mamba/ops/cpu/gdn_attention.py"
pytestmark, package = harness_patch_files.upstream_package(UPSTREAM, [TARGET])
patch_module = partial(harness_patch_files.load, ROOT / "envs" / "engine-next" / "cpu_gdn_float32.py")


def core_body(path: Path):
    """The statements of cpu_gdn_attention_core, the custom op every CPU GDN layer calls."""
    [fn] = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == "cpu_gdn_attention_core"]
    return fn.body


def test_the_edit_lands_once_before_the_bf16_assert_and_again_is_a_no_op(package):
    patch = patch_module()
    written = [f"{rel} written" for rel in patch.MODULES]
    assert patch.apply(package) == [f"{TARGET} edited", *written]
    edited = (package / TARGET).read_text()
    assert patch.apply(package) == [f"{TARGET} already edited", *written]
    assert (package / TARGET).read_text() == edited
    compile(edited, TARGET, "exec")

    body = core_body(package / TARGET)
    [branch] = [i for i, s in enumerate(body) if isinstance(s, ast.If) and "torch.bfloat16" in ast.unparse(s.test)]
    [check] = [i for i, s in enumerate(body) if isinstance(s, ast.Assert) and "torch.bfloat16" in ast.unparse(s.test)]
    assert branch == check - 1  # the stand-in is asked first; BF16 goes on to the CPU build's kernels
    stand_in = ast.unparse(body[branch])
    assert ast.unparse(body[branch].test) == "mixed_qkv.dtype != torch.bfloat16"
    assert "forward(layer, attn_metadata_i, mixed_qkv, b, a, core_attn_out)" in stand_in and stand_in.rstrip().endswith("return")
    # ... once the function knows it has a step to compute: its layer's metadata, and tokens.
    assert "attn_metadata_i.num_actual_tokens == 0" in ast.unparse(body[branch - 1].test)


def test_the_stand_in_modules_are_the_backports_arithmetic_and_the_glue(package):
    patch = patch_module()
    patch.apply(package)
    cpu_ops = package / "model_executor" / "layers" / "mamba" / "ops" / "cpu"
    gated_delta = ROOT / "common" / "vllm_plugin" / "compat_backports" / "layers" / "gated_delta.py"
    assert (cpu_ops / "compat_gated_delta.py").read_bytes() == gated_delta.read_bytes()
    glue = (cpu_ops / "compat_gdn_float32.py").read_text()
    assert glue == (ROOT / "envs" / "engine-next" / "gdn_float32_stand_in.py").read_text()
    imported = {
        a.name for n in ast.walk(ast.parse(glue)) if isinstance(n, ast.ImportFrom) and n.module == "compat_gated_delta" for a in n.names
    }
    assert imported <= {n.name for n in ast.parse(gated_delta.read_text()).body if isinstance(n, ast.FunctionDef)}


def test_the_pinned_arithmetic_is_the_backports_own():
    """A change to gated_delta.py must be pinned in the patch, which rebuilds the venv (its key is
    the spec folder's hash) and makes the 0.32 cells stale: they ran the old arithmetic."""
    patch = patch_module()
    assert hashlib.sha256(patch.GATED_DELTA.read_bytes()).hexdigest() == patch.GATED_DELTA_SHA256


def test_another_vllms_file_is_refused_before_anything_is_written(package):
    patch = patch_module()
    target = package / TARGET
    target.write_text(target.read_text().replace('"CPU GDN attention requires BF16."', '"requires BF16"'))
    before = sorted(p.name for p in target.parent.iterdir()), target.read_text()
    with pytest.raises(ValueError, match="anchor not found exactly once"):
        patch.apply(package)
    assert (sorted(p.name for p in target.parent.iterdir()), target.read_text()) == before


def test_an_arithmetic_other_than_the_pinned_one_is_refused(package, monkeypatch):
    patch = patch_module()
    monkeypatch.setattr(patch, "GATED_DELTA_SHA256", "0" * 64)
    before = (package / TARGET).read_text()
    with pytest.raises(ValueError, match="is not the one pinned here"):
        patch.apply(package)
    assert (package / TARGET).read_text() == before and len(list((package / TARGET).parent.iterdir())) == 1
