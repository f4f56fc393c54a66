"""doctor builds the engine's model class (MB, issue 37): what the real engines refuse when they
construct their model class, doctor says before the start, with the engine's own message.

Tiny models made here by the builders the other engine tests use (harness/fixtures/build_model.py,
metadata only: config.json and a tokenizer, no weights), each saved by the transformers its
author would have used, with one configuration value the engine's model code refuses:
  llama-gelu      a Llama with hidden_act "gelu" (BI-100's transformers 4.55): vLLM's LlamaMLP
                  raises "Unsupported activation: gelu. Only silu is supported for now." on every
                  engine here;
  gemma2-gelu     a Gemma 2 (transformers 4.57) whose MLP is the exact GELU: Gemma2MLP raises
                  "Gemma2 uses `gelu_pytorch_tanh` as the hidden activation" on vLLM 0.11 and 0.32;
                  on vLLM 0.5.5 R10 serves every Gemma 2 by the image's backport, whose MLP
                  refuses the activation itself ("unsupported activation 'gelu'");
  gemma4-bidirectional  a Gemma 4 whose attention is bidirectional over all tokens (transformers
                  5): on vLLM 0.5.5 the image's own Gemma 4 backport refuses it ("... is not supported on this engine (not a causal LM)"),
                  after R12/R10 gave the engine its config class and backport;
and the controls: `gemma4-moe`, a Gemma 4 with its MoE block (26B-A4B), which the image's Gemma 4
backport builds on vLLM 0.5.5 (its tanh-GELU experts on the grouped path) and vLLM 0.32 has itself; `llama` (the committed 457-generic fixture, unchanged) starts on every engine
with no MB finding, and `llama-gelu-config-only` holds config.json alone (no tokenizer, no
weights): the model build needs nothing else.
One doctor run per card judges them all (doctor_many: one engine process for the checks, one
for the model builds), as a user runs it, with each card's engine venv as its engine Python, and
leaves every model directory as it was (red line 1). About a minute on two cores, most of it
vLLM's imports and the builders; each engine's test skips where its venv is missing.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict

import pytest

from common.image_checks.selftest import tree_digest
from harness.engine import ENGINE_055, ENGINE_0110, ENGINE_NEXT, ROOT
from harness.fixtures.committed import COMMITTED
from harness.fixtures.factory import build

pytestmark = [pytest.mark.e2e]

PLATFORM_ARGS = ["--max-model-len", "256"]
# name -> (saved by, build_model.py options)
BUILT = {
    "llama-gelu": ("455", ("--set", 'hidden_act="gelu"')),
    "gemma2-gelu": (
        "457",
        (
            "--model-type",
            "gemma2",
            "--set",
            "tie_word_embeddings=true",  # vLLM's Gemma 2 asserts tied embeddings
            "--set",
            'hidden_act="gelu_pytorch_tanh"',  # transformers 4.57 no longer writes it; vLLM 0.5.5 and 0.11 read it
            "--set",
            'hidden_activation="gelu"',
        ),
    ),
    "gemma4-moe": (
        "v5",
        (
            "--model-type",
            "gemma4",
            "--set",
            "enable_moe_block=true",
            "--set",
            "num_experts=4",
            "--set",
            "top_k_experts=2",
            "--set",
            "moe_intermediate_size=128",
        ),
    ),
    "gemma4-bidirectional": ("v5", ("--model-type", "gemma4", "--set", 'use_bidirectional_attention="all"')),
}
LLAMA_REFUSAL = "ValueError: Unsupported activation: gelu. Only silu is supported for now. (vllm/model_executor/models/llama.py:"
GEMMA2_REFUSAL = "ValueError: Gemma2 uses `gelu_pytorch_tanh` as the hidden activation function."
GEMMA2_BACKPORT_REFUSAL = (
    "the image's compat_backports (on vLLM 0.5.5) refuses this configuration: ValueError: backport: unsupported activation 'gelu'"
)
GEMMA4_REFUSAL = (
    "the image's compat_backports (on vLLM 0.5.5) refuses this configuration: ValueError: Gemma 4 backport: bidirectional "
    "attention over all tokens is not supported on this engine (not a causal LM)"
)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    """The models, built side by side (each builder is a process of its own transformers)."""
    base = tmp_path_factory.mktemp("zoo")
    with ThreadPoolExecutor(len(BUILT)) as pool:
        for job in [
            pool.submit(build, saved_by, "generic", base / name, "--no-weights", *options) for name, (saved_by, options) in BUILT.items()
        ]:
            job.result()
    for name in BUILT:
        (base / f"{name}.author.json").unlink()  # beside the models, not one of them
    shutil.copytree(COMMITTED / "457-generic", base / "llama")
    (base / "llama-gelu-config-only").mkdir()
    shutil.copy(base / "llama-gelu" / "config.json", base / "llama-gelu-config-only" / "config.json")
    for model in base.iterdir():
        assert not list(model.glob("*.safetensors")), model
    return base


def doctor_all(folder: Path, card: str, env_extra: Dict[str, str]) -> dict:
    """`python3 -m common doctor FOLDER --card CARD --json` as a user runs it; rows by (model, card)."""
    env = dict(os.environ, **env_extra)
    env.pop("COMPAT_SKIP", None)
    before = tree_digest(str(folder))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "common", "doctor", str(folder), "--card", card, "--json", "--", *PLATFORM_ARGS],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.stdout.startswith("{"), proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    report["seconds"] = time.monotonic() - started
    report["by"] = {(Path(r["model"]).name, r["card"]): r for r in report["rows"]}
    report["stderr"] = proc.stderr
    assert tree_digest(str(folder)) == before, "red line 1: the model build wrote into a model directory"
    return report


def mb(row: dict) -> str:
    """The MB finding's message of a row ("" when none)."""
    return " | ".join(f["message"] for f in row["findings"] if f["code"] == "MB")


@pytest.mark.skipif(not ENGINE_055.available(), reason=ENGINE_055.missing_reason)
def test_bi100_refuses_what_vllm_055s_model_code_and_the_images_backport_refuse(zoo):
    report = doctor_all(zoo, "iluvatar-bi100", {"COMPAT_ENGINE_PYTHON": str(ENGINE_055.python)})
    by = report["by"]
    assert "iluvatar-bi100: the engine's model classes of 6 models, one process" in report["stderr"], report["stderr"][-2000:]
    for name in ("llama-gelu", "llama-gelu-config-only"):
        row = by[name, "iluvatar-bi100"]
        assert row["verdict"] == "fails" and row["failing"] == ["MB"], row
        assert mb(row).startswith("vLLM 0.5.5's model code refuses this configuration: " + LLAMA_REFUSAL), row
    # Every Gemma 2 reaches vLLM 0.5.5 through the image's backport (R10): it is the backport's refusal.
    row = by["gemma2-gelu", "iluvatar-bi100"]
    assert "R10" in row["repairs"] and row["verdict"] == "fails" and "MB" in row["failing"], row
    assert mb(row).startswith(GEMMA2_BACKPORT_REFUSAL), row
    # Gemma 4 reaches vLLM 0.5.5 through the image's config class and backport: it is their refusal.
    row = by["gemma4-bidirectional", "iluvatar-bi100"]
    assert {"R12", "R10"} <= set(row["repairs"]) and row["verdict"] == "fails" and row["failing"] == ["MB"], row
    assert mb(row).startswith(GEMMA4_REFUSAL) and "compat_backports/gemma4.py:" in mb(row), row
    # Its MoE block is built by the backport (the grouped tanh-GELU experts), not refused.
    row = by["gemma4-moe", "iluvatar-bi100"]
    assert {"R12", "R10"} <= set(row["repairs"]) and row["verdict"] == "starts" and not mb(row), row
    clean = by["llama", "iluvatar-bi100"]
    assert clean["verdict"] == "starts" and not mb(clean), clean


@pytest.mark.skipif(
    not (ENGINE_0110.available() and ENGINE_NEXT.available()), reason=f"{ENGINE_0110.missing_reason}; {ENGINE_NEXT.missing_reason}"
)
def test_nv_a100_and_its_next_engine_refuse_what_their_model_code_refuses(zoo):
    """nv-a100's two engines in one doctor run (vLLM 0.11.0 and 0.32.0, each its own processes)."""
    report = doctor_all(
        zoo, "nv-a100", {"COMPAT_ENGINE_PYTHON": str(ENGINE_0110.python), "COMPAT_ENGINE_PYTHON_NEXT": str(ENGINE_NEXT.python)}
    )
    by = report["by"]
    for card, version in (("nv-a100", "0.11.0"), ("nv-a100@next", "0.32.0")):
        for name in ("llama-gelu", "llama-gelu-config-only"):
            row = by[name, card]
            assert row["verdict"] == "fails" and row["failing"] == ["MB"], row
            assert mb(row).startswith(f"vLLM {version}'s model code refuses this configuration: " + LLAMA_REFUSAL), row
        row = by["gemma2-gelu", card]
        assert row["verdict"] == "fails" and "MB" in row["failing"] and GEMMA2_REFUSAL in mb(row), row
        clean = by["llama", card]
        assert clean["verdict"] == "starts" and not mb(clean), clean
    # vLLM 0.11.0 has no Gemma 4 (R10 says so before any build); 0.32.0 builds its MoE block itself.
    assert by["gemma4-moe", "nv-a100"]["failing"] == ["R10"] and not mb(by["gemma4-moe", "nv-a100"])
    assert by["gemma4-moe", "nv-a100@next"]["verdict"] == "starts", by["gemma4-moe", "nv-a100@next"]
