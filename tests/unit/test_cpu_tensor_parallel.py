"""The engine055 venv's CPU tensor-parallel harness patch (envs/engine055/cpu_tensor_parallel.py)
on the real upstream vLLM 0.5.5 files: each edit lands exactly once, again is a no-op, and another
vLLM's files are refused before anything is written. That the patched engine serves the author's
tokens at --tensor-parallel-size 2 is the conformance matrix's TP cells (tests/e2e/test_conformance.py
runs one per backport path)."""

import ast
import shutil
from pathlib import Path

import pytest

from tests.unit import harness_patch_files

from common.tests.helpers import ROOT

UPSTREAM = ROOT / ".upstream" / "vllm-0_5_5" / "vllm"
FILES = ("config.py", "distributed/parallel_state.py")
pytestmark = pytest.mark.skipif(not (UPSTREAM / FILES[0]).exists(), reason="no upstream sources: run `make upstream-src`")


def patch_module():
    return harness_patch_files.load(ROOT / "envs" / "engine055" / "cpu_tensor_parallel.py")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(UPSTREAM / rel, tmp_path / rel)
    return tmp_path


def function_source(path: Path, cls: str, name: str) -> str:
    text = path.read_text()
    tree = ast.parse(text)
    [klass] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls]
    [fn] = [n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name]
    return ast.get_source_segment(text, fn)


def test_each_edit_lands_once_and_again_is_a_no_op(package):
    patch = patch_module()
    assert patch.apply(package) == [f"{rel} edited" for rel, _, _ in patch.EDITS]
    edited = {rel: (package / rel).read_text() for rel in FILES}
    assert patch.apply(package) == [f"{rel} already edited" for rel, _, _ in patch.EDITS]
    assert {rel: (package / rel).read_text() for rel in FILES} == edited

    # Ray only off the CPU; pynccl only where CUDA runs; Intel's extension only where installed,
    # else the all-reduce falls through to gloo's torch.distributed.all_reduce.
    parallel = package / "distributed" / "parallel_state.py"
    reduce = function_source(parallel, "GroupCoordinator", "all_reduce")
    cpu_branch = reduce.index("elif input_.is_cpu and importlib.util.find_spec")
    assert reduce.index("torch.distributed.all_reduce(input_, group=self.device_group)") > cpu_branch
    assert "and torch.cuda.is_available()" in function_source(parallel, "GroupCoordinator", "__init__")
    assert "cuda_device_count_stateless() < self.world_size and not is_cpu()" in (package / "config.py").read_text()
    for rel in FILES:
        compile(edited[rel], rel, "exec")  # still Python


def test_another_vllms_files_are_refused_before_anything_is_written(package):
    patch = patch_module()
    config = package / "config.py"
    config.write_text(config.read_text().replace("cuda_device_count_stateless() < self.world_size", "self.world_size > 8"))
    before = {rel: (package / rel).read_text() for rel in FILES}
    with pytest.raises(ValueError, match="anchor not found exactly once"):
        patch.apply(package)
    assert {rel: (package / rel).read_text() for rel in FILES} == before
