"""Make the CMake files of this venv's torch (PyPI's CUDA build of 2.4.0) usable for a CPU-only build.

Why: vLLM 0.5.5's CPU extension calls `find_package(Torch)`. The CUDA wheel's CMake config then
insists on a CUDA toolkit ("Your installed Caffe2 version uses CUDA but I cannot find the CUDA
libraries") and links every consumer against torch_cuda. No CPU wheel of torch 2.4.0 is on PyPI,
so the three places that pull CUDA in are switched off here:
  Caffe2Config.cmake   the block that includes public/cuda.cmake (finds the toolkit, or fails)
  TorchConfig.cmake    the block that appends the CUDA libraries to TORCH_LIBRARIES
  Caffe2Targets.cmake  the `torch` target links torch_cpu_library only, not torch_cuda_library
Only CMake reads these files; torch itself, at run time, is unchanged.

Each edit is anchored on the exact text of the 2.4.0 files and must match exactly once: a torch
whose files read differently fails here, loudly, instead of configuring something half-edited.
Running it again is a no-op (an edit already applied is recognised by its replacement text).

usage: python torch_cmake_cpu_only.py   (with the venv's python: it finds torch by importing it)
"""

import sys
from pathlib import Path

EDITS = [
    (
        "Caffe2/Caffe2Config.cmake",
        "if(ON)\n  # The file public/cuda.cmake exclusively uses CAFFE2_USE_*.\n",
        "if(OFF)  # enginex-compat: CPU-only build, no CUDA toolkit\n  # The file public/cuda.cmake exclusively uses CAFFE2_USE_*.\n",
    ),
    (
        "Torch/TorchConfig.cmake",
        "if(ON)\n  if(MSVC)\n    if(NOT NVTOOLEXT_HOME)\n",
        "if(OFF)  # enginex-compat: CPU-only build, no CUDA libraries\n  if(MSVC)\n    if(NOT NVTOOLEXT_HOME)\n",
    ),
    (
        "Caffe2/Caffe2Targets.cmake",
        'set_target_properties(torch PROPERTIES\n  INTERFACE_LINK_LIBRARIES "torch_cpu_library;torch_cuda_library"\n)\n',
        'set_target_properties(torch PROPERTIES\n  INTERFACE_LINK_LIBRARIES "torch_cpu_library"\n)\n',
    ),
]


def main() -> int:
    import torch.utils

    cmake_dir = Path(torch.utils.cmake_prefix_path)
    for rel, old, new in EDITS:
        path = cmake_dir / rel
        text = path.read_text()
        if text.count(new) == 1 and old not in text:
            print(f"torch cmake: {rel} already CPU-only")
            continue
        if text.count(old) != 1:
            sys.exit(
                f"torch cmake: anchor not found exactly once in {path}; torch {torch.__version__} "
                f"is not the 2.4.0 this edit was written for:\n{old}"
            )
        path.write_text(text.replace(old, new))
        print(f"torch cmake: {rel} made CPU-only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
