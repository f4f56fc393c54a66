# shellcheck shell=bash
# Real upstream vLLM 0.5.5 on the CPU: the engine generation the Iluvatar BI-100 card ships (its
# vendor fork is ~0.5.5 with ixformer), built here from the upstream source archive so that the
# e2e suite sees what vanilla 0.5.5 does with a model and what the launcher's repairs change.
# Run by scripts/make-venv.sh with PY (the venv's python, 3.10) and VENV set. The order matters:
# 1. numa.h: the CPU extension (csrc/cpu) includes it. Debian's libnuma-dev is installed when it
#    is missing and this runs as root (through scripts/apt-install.sh, so that it never collides
#    with another install of the project's); otherwise the build stops and says what to install.
# 2. pyairports stand-in before any pip run (pyairports_stub.py says why: PyPI's is a placeholder).
# 3. torch 2.4.0, transformers 4.55.4, build tools and the sdist's requirements-common.txt in one
#    resolve, every version held by constraints.txt.
# 4. torch's CMake files made CPU-only (torch_cmake_cpu_only.py says why).
# 5. vLLM from its sdist, fetched and sha256-checked by scripts/fetch_upstream.py from the entry in
#    envs/upstream/sources.toml (the one place that knows its url and hash): `pip download` can not
#    get it (without torch setup.py can not run; with torch the built metadata says 0.5.5+cpu and
#    pip rejects the "inconsistent version"). VLLM_TARGET_DEVICE=cpu; no build isolation, so it
#    compiles against the torch above; --no-deps because its metadata pins torch==2.4.0+cpu, which
#    no index has (pip prints an ERROR about that pin in this venv from then on: harmless).
#    The CPU kernels are compiled for this machine's ISA (AVX512 when present): the venv is cached
#    per machine, never copied to another.
# 6. Tensor parallelism on the CPU (cpu_tensor_parallel.py says what and why): a harness patch of
#    this stand-in of the card's engine, never of the image's code; on the card the vendor's engine
#    and communicator shard the model, and the platform passes only --tensor-parallel-size.
# The venv is keyed by the hash of this folder: the sdist is named here by its sources.toml entry,
# and a new vLLM version is a new entry name, so changing it here rebuilds the venv.
set -euo pipefail
spec=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$spec/../.." && pwd)
source_entry=vllm-0_5_5

# 1. numa.h
if ! echo '#include <numa.h>' | "${CXX:-c++}" -E -x c++ - >/dev/null 2>&1; then
    "$root/scripts/apt-install.sh" libnuma-dev || {
        echo "engine055: numa.h not found: install libnuma-dev (Debian/Ubuntu; numactl-devel on Fedora) as root, then rerun" >&2
        exit 1
    }
fi

# 2. pyairports stand-in
"$PY" "$spec/pyairports_stub.py"

# 3. torch, transformers, build tools, vLLM's runtime requirements
archive=$("$PY" "$root/scripts/fetch_upstream.py" --archive "$source_entry")
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
tar -xzf "$archive" -C "$src" --strip-components=1
"$PY" -m pip install -q -r "$spec/requirements.txt" -r "$src/requirements-common.txt" -c "$spec/constraints.txt" -c "$spec/lock.txt"

# 4. torch's CMake files without CUDA
"$PY" "$spec/torch_cmake_cpu_only.py"

# 5. vLLM itself. The venv's bin first on PATH: setup.py runs `cmake` and `ninja` by name.
#    Its default build type, RelWithDebInfo, compiles `-O2 -g`; a build type of no flags of its
#    own with CXXFLAGS "-O2 -DNDEBUG" gives the very same compile lines without -g: the same
#    machine code (GCC's -g changes no instruction: the two builds' .text sections are byte for
#    byte the same), a third less compile time, 0.6 MB of extensions instead of 21.
PATH="$VENV/bin:$PATH" VLLM_TARGET_DEVICE=cpu MAX_JOBS="${MAX_JOBS:-$(nproc)}" \
    CMAKE_BUILD_TYPE=RelNoDebInfo CXXFLAGS="-O2 -DNDEBUG" \
    "$PY" -m pip install -q --no-deps --no-build-isolation "$src"

# 6. CPU tensor parallelism
"$PY" "$spec/cpu_tensor_parallel.py"

# vLLM 0.5.5 decides it runs on the CPU only from "cpu" in the version of the distribution "vllm"
# (vllm/utils.py is_cpu()); the build names it 0.5.5+cpu. Checked from outside the source tree.
cd /
"$PY" - <<'CHECK'
import importlib.metadata
import torch, transformers, vllm
dist = importlib.metadata.version("vllm")
assert "cpu" in dist, f"vllm distribution version {dist!r} lacks 'cpu': vLLM would not pick the CPU platform"
from vllm.utils import is_cpu
assert is_cpu(), "vllm.utils.is_cpu() is False"
import vllm._C  # noqa: F401  the compiled CPU kernels load against this torch
print("engine055 venv: vllm", vllm.__version__, f"({dist}), torch", torch.__version__, "transformers", transformers.__version__)
CHECK
