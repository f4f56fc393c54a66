"""Let this venv's vLLM 0.5.5 (the BI-100's engine generation, built for the CPU) run
`--tensor-parallel-size N` on the CPU, as the card's own engine runs it on its devices.

A harness patch of the CPU stand-in, never of the image: on the card, the vendor's engine and
communicator do this job, and the platform passes only `--tensor-parallel-size`. Upstream 0.5.5
has CPU tensor parallelism (CPUExecutor's worker processes over gloo, vLLM PR 6125); three things
stop it here, each edited below:
  config.py          ParallelConfig asks for Ray when there are fewer CUDA devices than ranks
                     (none on the CPU: "Unable to load Ray which is required for multi-node
                     inference"). CPUExecutor starts its own worker processes whatever the
                     backend says, so on the CPU the backend is multiprocessing.
  parallel_state.py  GroupCoordinator builds a pynccl communicator whenever the torch build
                     ships libnccl (PyPI's 2.4.0 CUDA build does: "Expected a cuda device, but
                     got: cpu"). Only where CUDA runs.
  parallel_state.py  The CPU all-reduce is Intel's extension (ipex.distributed.all_reduce), which
                     this build lacks: gloo's own torch.distributed.all_reduce where it is absent.
Each edit is anchored on the exact text of 0.5.5's files and must match exactly once; running it
again is a no-op (an applied edit is recognised by its replacement text).

usage: python cpu_tensor_parallel.py   (with the venv's python: it finds vLLM without importing it;
tests/unit/test_cpu_tensor_parallel.py applies it to the 0.5.5 sdist's own files)
"""

import sys
from pathlib import Path
from typing import List

# envs/: the applier every harness patch shares (source_edits.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from source_edits import apply_edits, run  # noqa: E402

EDITS = [
    (
        "config.py",
        "            if cuda_device_count_stateless() < self.world_size:\n",
        "            if cuda_device_count_stateless() < self.world_size and not is_cpu():  # enginex-compat: CPU TP\n",
    ),
    (
        "distributed/parallel_state.py",
        "        if use_pynccl and self.world_size > 1:\n",
        "        if use_pynccl and self.world_size > 1 and torch.cuda.is_available():  # enginex-compat: CPU TP\n",
    ),
    (
        "distributed/parallel_state.py",
        "        elif input_.is_cpu:\n"
        "            import intel_extension_for_pytorch as ipex\n"
        "            ipex.distributed.all_reduce(input_, group=self.device_group)\n",
        '        elif input_.is_cpu and importlib.util.find_spec("intel_extension_for_pytorch") is not None:  # enginex-compat: CPU TP\n'
        "            import intel_extension_for_pytorch as ipex\n"
        "            ipex.distributed.all_reduce(input_, group=self.device_group)\n",
    ),
    (
        "distributed/parallel_state.py",
        "import contextlib\n",
        "import contextlib\nimport importlib.util  # enginex-compat: CPU TP\n",
    ),
]


def apply(root: Path) -> List[str]:
    """Edit the vLLM package at `root`; what was done, per edit (source_edits.apply_edits)."""
    return apply_edits(root, EDITS, "0.5.5")


if __name__ == "__main__":
    sys.exit(run("cpu tensor parallel", apply))
