"""L3 on a vendor package tree the test builds, and the op against real vLLM 0.11.0's GeluAndMul."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "cards" / "iluvatar-bi100" / "patches" / "ixformer_ops"
ENGINE_PY = ROOT / ".venv-engine" / "bin" / "python"


def vendor_tree(tmp_path):
    pkg = tmp_path / "site" / "ixformer" / "functions"
    pkg.mkdir(parents=True)
    (tmp_path / "site" / "ixformer" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .silu_and_mul import *")  # no trailing newline, as seen
    (pkg / "silu_and_mul.py").write_text("__all__ = ['silu_and_mul']\ndef silu_and_mul(out, x):\n    return out\n")
    return tmp_path / "site", pkg


def run_step(site, ops=OPS):
    """As the image build runs it: a module of the build steps, the image's packages on the path."""
    return subprocess.run(
        [sys.executable, "-m", "compat_build.image_steps.install_patched_ops", str(ops), "ixformer.functions"],
        env={"PYTHONPATH": f"{ROOT}{os.pathsep}{site}"},
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )


def test_installs_exports_and_second_run_changes_nothing(tmp_path):
    site, pkg = vendor_tree(tmp_path)
    original = (pkg / "__init__.py").read_text()
    first = run_step(site)
    assert first.returncode == 0, first.stderr
    assert "L3 ixformer.functions.gelu_tanh_and_mul: installed" in first.stdout
    init = (pkg / "__init__.py").read_text()
    assert init == original + "\nfrom .gelu_tanh_and_mul import *\n"
    assert (pkg / "__init__.py.enginex-orig").read_text() == original
    snapshot = {p.name: p.read_bytes() for p in pkg.iterdir()}
    second = run_step(site)
    assert second.returncode == 0 and "gelu_tanh_and_mul: unchanged" in second.stdout
    assert {p.name: p.read_bytes() for p in pkg.iterdir()} == snapshot
    out = subprocess.run(
        [sys.executable, "-c", "import ixformer.functions as f; print(sorted(n for n in dir(f) if 'mul' in n))"],
        env={"PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "gelu_tanh_and_mul" in out and "silu_and_mul" in out


def test_broken_op_fails_the_build(tmp_path):
    site, _ = vendor_tree(tmp_path)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "__init__.py").write_text("this is skipped")
    (ops / "bad_op.py").write_text("def broken(:\n")
    proc = run_step(site, ops)
    assert proc.returncode == 1 and "bad_op: failed" in proc.stdout


def test_missing_vendor_package_fails_with_a_sentence(tmp_path):
    proc = run_step(tmp_path)
    assert proc.returncode != 0 and "ixformer.functions is not an installed package" in proc.stderr


@pytest.mark.skipif(not ENGINE_PY.exists(), reason="no .venv-engine")
def test_op_matches_vllm_gelu_and_mul_tanh():
    code = f"""
import importlib.util, json, torch
from vllm.model_executor.layers.activation import GeluAndMul
spec = importlib.util.spec_from_file_location("op", {str(OPS / "gelu_tanh_and_mul.py")!r})
op = importlib.util.module_from_spec(spec); spec.loader.exec_module(op)
errs = {{}}
for dtype in (torch.float32, torch.bfloat16):
    for shape in ((1, 8), (7, 256), (2, 3, 1024)):
        x = torch.randn(*shape, dtype=dtype)
        want = GeluAndMul(approximate="tanh").forward_native(x)
        out = torch.empty(*shape[:-1], shape[-1] // 2, dtype=dtype)
        got = op.gelu_tanh_and_mul(out, x)
        assert got is out
        errs[f"{{dtype}} {{shape}}"] = (got.float() - want.float()).abs().max().item()
print(json.dumps(errs))
"""
    proc = subprocess.run([str(ENGINE_PY), "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    errors = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(err == 0.0 for err in errors.values()), errors
