"""The engine055 venv's CPU tensor-parallel harness patch (envs/engine055/cpu_tensor_parallel.py)
on the real upstream vLLM 0.5.5 files: each edit lands exactly once, again is a no-op, and another
vLLM's files are refused before anything is written. That the patched engine serves the author's
tokens at --tensor-parallel-size 2 is the conformance matrix's TP cells (tests/e2e/test_conformance.py
runs one per backport path)."""

from functools import partial
from pathlib import Path

import pytest

from tests.unit import harness_patch_files

from common.tests.helpers import ROOT

UPSTREAM = ROOT / ".upstream" / "vllm-0_5_5" / "vllm"
FILES = ("config.py", "distributed/parallel_state.py")
pytestmark, package = harness_patch_files.upstream_package(UPSTREAM, FILES, needed=FILES[:1])
patch_module = partial(harness_patch_files.load, ROOT / "envs" / "engine055" / "cpu_tensor_parallel.py")


def function_source(path: Path, cls: str, name: str) -> str:
    return harness_patch_files.function_source(path, name, cls)


def test_each_edit_lands_once_and_again_is_a_no_op(package):
    edited = harness_patch_files.edits_land_once(patch_module(), package, FILES)

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
