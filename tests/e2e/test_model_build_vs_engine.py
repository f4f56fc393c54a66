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
                  5): on vLLM 0.5.5 and 0.11 the image's own Gemma 4 backports refuse it ("... is not supported on this engine (not a causal LM)"),
                  after R12/R10 gave the engine its config class and backport;
and the controls: `gemma4-moe`, a Gemma 4 with its MoE block (26B-A4B), which the image's Gemma 4
backports build on vLLM 0.5.5 and 0.11 (its tanh-GELU experts on the grouped path) and vLLM 0.32 has itself; `llama` (the committed 457-generic fixture, unchanged) starts on every engine
with no MB finding, and `llama-gelu-config-only` holds config.json alone (no tokenizer, no
weights): the model build needs nothing else.
R13's names (common/engine/config_names.json) are held to vLLM 0.11.0 itself: a Gemma 2 saved by
transformers 5 (`hidden_activation` only), and config.json alone of each other family whose name
0.11's model code reads without the config carrying it (DeepSeek-V2, GLM-4.5 without a head_dim,
LFM2, ModernBERT, PaliGemma 2's nested Gemma 2), saved by transformers 5: each is refused naming
the name when R13 is skipped, and built with R13's repair.
One doctor run per card judges them all (doctor_many: one engine process for the checks, one
for the model builds), as a user runs it, with each card's engine venv as its engine Python, and
leaves every model directory as it was (red line 1). About a minute on two cores, most of it
vLLM's imports and the builders; each engine's test skips where its venv is missing.
"""

import json
import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict

import pytest

from common.build_checks.selftest import tree_digest
from common.tests.helpers import run_common
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
# R13's families, config.json alone, as transformers 5 saves them: name -> (the expression, the
# class it is saved as, the name vLLM 0.11.0's model code reads that the save lacks).
SMALL = "hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=512"
R13_CONFIGS = {
    "deepseek-v2": (
        f"DeepseekV2Config({SMALL}, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, kv_lora_rank=64, "
        "q_lora_rank=None, qk_nope_head_dim=32, qk_rope_head_dim=32, v_head_dim=64, first_k_dense_replace=1, n_group=1, topk_group=1)",
        "DeepseekV2ForCausalLM",
        "moe_layer_freq",
    ),
    "glm4-moe": (
        f"Glm4MoeConfig({SMALL}, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, first_k_dense_replace=1, "
        "n_group=1, topk_group=1)",
        "Glm4MoeForCausalLM",
        "head_dim",
    ),
    "lfm2": (f"Lfm2Config({SMALL})", "Lfm2ForCausalLM", "conv_dim"),
    "modernbert": (f"ModernBertConfig({SMALL})", "ModernBertModel", "layer_norm_eps"),
    "paligemma2": (
        f"PaliGemmaConfig(text_config=Gemma2Config({SMALL}, head_dim=64).to_dict(), vision_config=dict(hidden_size=64, "
        "intermediate_size=128, num_hidden_layers=1, num_attention_heads=2, image_size=224, patch_size=14), projection_dim=256)",
        "PaliGemmaForConditionalGeneration",
        "hidden_act",
    ),
}
SAVE_CONFIGS = """
import json, os, re, sys, transformers
for name, (expr, arch, _) in json.loads(sys.argv[1]).items():
    config = eval(expr, {c: getattr(transformers, c) for c in re.findall(r"\\w+Config", expr)})
    config.architectures = [arch]
    config.save_pretrained(os.path.join(sys.argv[2], name))
"""
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


@pytest.fixture(scope="module")
def r13_zoo(tmp_path_factory) -> Path:
    """A Gemma 2 saved by transformers 5 (its tokenizer too), and R13_CONFIGS' config.json alone."""
    base = tmp_path_factory.mktemp("r13")
    build("v5", "generic", base / "gemma2-v5", "--no-weights", "--model-type", "gemma2", "--set", "tie_word_embeddings=true")
    (base / "gemma2-v5.author.json").unlink()
    python = ROOT / ".venv-author" / "bin" / "python"
    code = [str(python), "-c", SAVE_CONFIGS, json.dumps(R13_CONFIGS), str(base)]
    subprocess.run(code, check=True, capture_output=True, timeout=300, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    return base


def doctor_all(folder: Path, card: str, env_extra: Dict[str, str], skip: str = "") -> dict:
    """`python3 -m common doctor FOLDER --card CARD --json` as a user runs it (COMPAT_SKIP=skip);
    rows by (model, card)."""
    env = dict(os.environ, **env_extra)
    env.pop("COMPAT_SKIP", None)
    if skip:
        env["COMPAT_SKIP"] = skip
    before = tree_digest(str(folder))
    started = time.monotonic()
    proc = run_common(["doctor", str(folder), "--card", card, "--json", "--", *PLATFORM_ARGS], env, timeout=900)
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
    assert mb(row).startswith(GEMMA4_REFUSAL) and "compat_backports/layers/gemma4.py:" in mb(row), row
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
    # vLLM 0.11.0 has no Gemma 4: the image's config class and its backport for the V1 engine
    # build the MoE block (R12, R10) and refuse what that backport refuses; 0.32.0 builds it itself.
    row = by["gemma4-moe", "nv-a100"]
    assert {"R12", "R10"} <= set(row["repairs"]) and row["verdict"] == "starts" and not mb(row), row
    row = by["gemma4-bidirectional", "nv-a100"]
    assert row["verdict"] == "fails" and row["failing"] == ["MB"], row
    assert mb(row).startswith(GEMMA4_REFUSAL.replace("0.5.5", "0.11.0")) and "compat_backports/layers/gemma4.py:" in mb(row), row
    assert by["gemma4-moe", "nv-a100@next"]["verdict"] == "starts", by["gemma4-moe", "nv-a100@next"]


@pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason)
def test_vllm_011_builds_what_r13_states_and_refuses_it_without(r13_zoo):
    """nv-a100's engine alone (its next variant left unasked): each model is refused naming the
    name R13 states when R13 is skipped, and built with R13's repair; the Gemma 2 starts."""
    env = {"COMPAT_ENGINE_PYTHON": str(ENGINE_0110.python), "COMPAT_ENGINE_PYTHON_NEXT": str(ROOT / "nonexistent" / "python")}
    without = doctor_all(r13_zoo, "nv-a100", env, skip="R13")["by"]
    repaired = doctor_all(r13_zoo, "nv-a100", env)["by"]
    names = dict({name: read for name, (_, _, read) in R13_CONFIGS.items()}, **{"gemma2-v5": "hidden_act"})
    for name, read in names.items():
        row = without[name, "nv-a100"]
        assert row["verdict"] == "fails" and "MB" in row["failing"], row
        # (LFM2's is its config check: the engine sizes its conv state from conv_dim before the build.)
        assert f"object has no attribute '{read}'" in mb(row) and mb(row).startswith("vLLM 0.11.0's "), row
        row = repaired[name, "nv-a100"]
        assert "R13" in row["repairs"] and not mb(row) and "MB" not in row["failing"], row
    assert repaired["gemma2-v5", "nv-a100"]["verdict"] == "starts", repaired["gemma2-v5", "nv-a100"]


@pytest.mark.parametrize("engine", [ENGINE_055, ENGINE_0110, ENGINE_NEXT], ids=lambda e: e.version)
def test_the_model_builds_lighter_import_leaves_the_engine_whole(engine):
    """The model build's process imports vLLM without what no build runs: on vLLM 0.5.5 neither
    scikit-learn nor the OpenAI API's types (which its eager offline entry point, vllm.LLM,
    brings) are loaded once vLLM is (doctor's speed: docs/memory.md); on every engine a module
    that asks for them afterwards gets the real ones."""
    if not engine.available():
        pytest.skip(engine.missing_reason)
    code = (
        f"import importlib.util, sys; sys.path.append({str(ROOT)!r})\n"
        "installed = importlib.util.find_spec('sklearn') is not None\n"
        "from common.engine_checks import model_build\n"
        "model_build.warm()\n"
        "import vllm\n"
        "left_out = ','.join(m for m in ('sklearn', 'openai') if m not in sys.modules) or '-'\n"
        "from vllm.entrypoints.llm import LLM\n"
        "from transformers.generation import GenerationMixin\n"
        "roc = __import__('sklearn.metrics').metrics.roc_curve.__name__ if installed else 'no-sklearn'\n"
        "print(vllm.__version__, left_out, LLM.__name__, GenerationMixin.__name__, roc)\n"
    )
    run = subprocess.run([str(engine.python), "-c", code], capture_output=True, text=True, env=engine.env(), timeout=300)
    # vLLM 0.5.5's venv has scikit-learn (its outlines' dependencies bring it), the others none;
    # 0.11 and 0.32 import the OpenAI API's types with their engine arguments (nothing left out).
    sklearn, left_out = ("roc_curve", "sklearn,openai") if engine is ENGINE_055 else ("no-sklearn", "sklearn")
    last = (run.stdout.strip().splitlines() or [""])[-1]  # vLLM 0.11 logs to stdout
    assert last.split() == [engine.version, left_out, "LLM", "GenerationMixin", sklearn], run.stderr[-2000:]
