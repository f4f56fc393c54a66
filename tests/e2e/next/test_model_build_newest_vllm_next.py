"""doctor's model build (MB) on nv-a100@next for the newest families: the engine venv carries what the
upstream vllm-openai image carries for vLLM's model code (torchvision, torchaudio, timm), so the
engine's own classes of Qwen3.5, Gemma 4, Llama 4 and Devstral Small 2 (Mistral 3) are built, and a
model doctor cannot judge here is one whose kernel this CPU build truly lacks, named.

1. Every model module vLLM 0.32 registers imports in the engine's Python (one probe), but for a
   package the upstream image lacks as well (terratorch, in vLLM's test requirements only) and a
   module that imports vLLM's CUDA flash-attention names outright (their CUDA platform defines
   them).
2. One doctor run on their checkpoints' shapes (harness/fixtures/newest_families.py, config.json
   only) as a user runs it, with the platform's arguments: every family starts (the engine builds
   its class on the meta device, Llama 4 Scout's ten-million-position rope cache included), and
   the quantized ones start where this CPU has the kernels vLLM 0.32's CPU build asks AMX tiles
   for (block-scaled FP8, MXFP4 experts), or say "unverified" naming the CPU kernel's own reason.
   C1 (the token layer: the conformance cells) is left out here: MB is what is judged.
About two minutes on two cores, most of it vLLM's imports.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from common.tests.helpers import run_common
from harness.engine import ENGINE_NEXT, ROOT
from harness.fixtures.newest_families import NEWEST, QUANTIZED, write_model

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE_NEXT.available(), reason=ENGINE_NEXT.missing_reason),
]

PROBE = ROOT / "tests" / "model_modules_probe.py"
# The platform's arguments for models of this size: a usual context, one node's tensor parallelism.
PLATFORM_ARGS = ["--max-model-len", "4096", "--tensor-parallel-size", "4"]
# Packages vLLM's model modules import that the upstream vllm-openai image does not install either.
NOT_IN_THE_IMAGE = {"terratorch"}


def test_every_model_module_vllm_registers_imports_in_the_engine():
    answer = ENGINE_NEXT.probe(PROBE, None)
    failed = answer["failed"]
    assert answer["modules"] > 200, answer
    missing = {m: e for m, e in failed.items() if e.startswith("ModuleNotFoundError")}
    assert {e.split("'")[1].split(".")[0] for e in missing.values()} <= NOT_IN_THE_IMAGE, missing
    others = {m: e for m, e in failed.items() if m not in missing}
    assert all(e.startswith("ImportError: cannot import name") and "attention.backends.fa_utils" in e for e in others.values()), others


@pytest.fixture(scope="module")
def shapes(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("newest")
    for name, config in {**NEWEST, **QUANTIZED}.items():
        write_model(base / name.split("/")[1], config)
    return base


def engine_has_amx() -> bool:
    """Whether the engine's torch finds AMX tiles on this CPU (what vLLM 0.32's CPU FP8 and MXFP4
    kernels ask for)."""
    probe = "import torch; print(torch.cpu._is_amx_tile_supported())"
    out = subprocess.run([str(ENGINE_NEXT.python), "-c", probe], env=ENGINE_NEXT.env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1] == "True"


def test_doctor_builds_the_newest_families_and_names_a_kernel_the_cpu_build_lacks(shapes):
    env = dict(os.environ, COMPAT_ENGINE_PYTHON_NEXT=str(ENGINE_NEXT.python), COMPAT_SKIP="C1")
    proc = run_common(["doctor", str(shapes), "--card", "nv-a100@next", "--json", "--", *PLATFORM_ARGS], env, timeout=900)
    assert proc.stdout.startswith("{"), proc.stderr[-3000:]
    rows = {Path(r["model"]).name: r for r in json.loads(proc.stdout)["rows"]}
    assert set(rows) == {name.split("/")[1] for name in {**NEWEST, **QUANTIZED}}
    mb = {name: [f for f in row["findings"] if f["code"] == "MB"] for name, row in rows.items()}
    for name in (n.split("/")[1] for n in NEWEST):
        assert rows[name]["verdict"] == "starts" and not mb[name], rows[name]
    amx = engine_has_amx()
    for name in (n.split("/")[1] for n in QUANTIZED):
        if amx:
            assert rows[name]["verdict"] == "starts" and not mb[name], rows[name]
        else:
            [finding] = mb[name]
            assert rows[name]["verdict"] == "unverified" and finding["severity"] == "unverified", rows[name]
            assert "the CPU build here has no kernel for this" in finding["message"], finding
            assert "this machine's CPU has no AMX tiles" in finding["message"], finding
