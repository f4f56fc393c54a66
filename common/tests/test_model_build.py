"""MB: doctor asks the engine to build its model class, after the other checks, with the final
arguments and model view; a refusal fails the verdict with the engine's message, a build that
cannot be asked is "unverified", and triage maps the same message in a log to MB. The engine
here is a fake Python that answers model builds from the model's name (the real engines:
tests/e2e/test_model_build_vs_engine.py); the engine side's own judgement of who refused is tested
on a fake vLLM package."""

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from common.doctor import model_build_finding as model_build
from common.plan import Plan
from common.triage import triage_file
from common.start.verify import run_checks

from common.tests.helpers import REFUSAL, ROOT, SKIPPED_MB, fake_engine, run_common


@pytest.fixture
def engine(tmp_path):
    """A fake engine Python (helpers.fake_engine) and the model-build batches it was sent."""
    return fake_engine(tmp_path)


@pytest.fixture
def env(env_for_tests, engine):
    """The fake engine answers for nv-a100 and for the variant --card names (nv-a100@next), and
    builds the model classes: the conftest's COMPAT_SKIP=MB (.venv has no vLLM) is not set."""
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(engine[0]), COMPAT_ENGINE_PYTHON_NEXT=str(engine[0]))
    env.pop("COMPAT_SKIP")
    return env


def clean_model(models, dest: Path) -> Path:
    """The committed transformers-4.57 tiny Llama (metadata only), under another name."""
    shutil.copytree(models("457-generic"), dest)
    return dest


def plan(tmp_path, **fields) -> Plan:
    p = Plan(card="nv-a100", model_dir=str(tmp_path / "model"))
    p.facts = {"architectures": ["LlamaForCausalLM"]}
    for key, value in fields.items():
        setattr(p, key, value)
    return p


# ---- the request and its finding ----------------------------------------------------------------


def test_the_request_is_what_the_engine_would_be_given(tmp_path):
    plugin_env = {"PYTHONPATH": model_build.PLUGIN_DIR + os.pathsep + "/elsewhere", "COMPAT_BACKPORTS": "Gemma4ForCausalLM"}
    viewed = plan(
        tmp_path,
        args=["--tokenizer", "/w/tokenizer"],
        user_args=["--max-model-len", "256", "--tensor-parallel-size", "2"],
        env=plugin_env,
        view={"why": "R10"},
        model_path="/w/view",
    )
    assert model_build.request_for(viewed) == {
        "kind": "model_build",
        "path": "/w/view",  # the model view vLLM is served in place of the model
        "args": ["--tokenizer", "/w/tokenizer", "--max-model-len", "256", "--tensor-parallel-size", "2"],
        "env": plugin_env,
        "register_plugin": True,
    }
    direct = model_build.request_for(plan(tmp_path, user_args=["--max-model-len", "256"], model_path="/w/unused"))
    assert direct["path"] == str(tmp_path / "model") and direct["env"] == {} and direct["register_plugin"] is False
    failing = plan(tmp_path)
    failing.add_finding("R4", "error", "not supported")
    assert model_build.request_for(failing) is None  # its verdict is decided: nothing to build
    assert model_build.request_for(plan(tmp_path, facts={})) is None  # no model directory or profile


def test_an_answer_becomes_a_finding(tmp_path):
    refused, unknown, built, silent = (plan(tmp_path) for _ in range(4))
    model_build.apply(refused, False, REFUSAL, {"kind": "model_build", "ok": False})
    assert [f.to_json() for f in refused.findings] == [{"code": "MB", "severity": "error", "message": REFUSAL}]
    model_build.apply(unknown, None, "cannot tell: vLLM is not importable", {"kind": "model_build", "ok": None})
    [finding] = unknown.findings
    assert finding.severity == "unverified" and "cannot tell: vLLM is not importable" in finding.message
    model_build.apply(built, True, "builds", {"kind": "model_build", "ok": True})
    assert built.findings == []
    # No answer at all (the process died, or its time ran out): says nothing of the model.
    model_build.apply(silent, False, "verification exited 3: no output", {})
    [finding] = silent.findings
    assert finding.severity == "unverified" and "gave no answer (verification exited 3" in finding.message


# ---- doctor with an engine that answers --------------------------------------------------------


def test_doctor_fails_a_model_the_engines_model_code_refuses(tmp_path, models, env, engine):
    folder = tmp_path / "models"
    for name in ("a-refused", "b-unknowable", "c-builds"):
        clean_model(models, folder / name)
    result = run_common(["doctor", str(folder), "--card", "nv-a100@next", "--json", "--", "--max-model-len", "256"], env)
    report = json.loads(result.stdout)
    rows = {Path(r["model"]).name: r for r in report["rows"]}
    assert result.returncode == 1, result.stderr
    assert rows["a-refused"]["verdict"] == "fails" and rows["a-refused"]["failing"] == ["MB"]
    assert rows["a-refused"]["findings"] == [{"code": "MB", "severity": "error", "message": REFUSAL}]
    assert rows["b-unknowable"]["verdict"] == "unverified" and rows["b-unknowable"]["unverified"] == ["MB"]
    assert rows["c-builds"]["verdict"] == "starts" and rows["c-builds"]["findings"] == []
    # All three in ONE engine process, after the checks (their own, torch-free process), torch on.
    [batch] = engine[1]()
    assert [Path(r["path"]).name for r in batch["requests"]] == ["a-refused", "b-unknowable", "c-builds"]
    assert batch["USE_TORCH"] is None
    assert all(r["args"] == ["--max-model-len", "256"] and r["register_plugin"] is False for r in batch["requests"])
    assert "nv-a100@next: the engine's model classes of 3 models, one process" in result.stderr


def test_doctor_tells_the_engines_message_and_its_fix(tmp_path, models, env, engine):
    model = clean_model(models, tmp_path / "llama-refused")
    result = run_common(["doctor", str(model), "--card", "nv-a100@next", "--", "--max-model-len", "256"], env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"| MB | {REFUSAL} | - | FAILS |" in result.stdout
    assert "verdict: this model will fail on nv-a100@next even with the image's repairs (MB)" in result.stdout
    assert "(python3 -m common explain MB)" in result.stdout
    [batch] = engine[1]()
    [request] = batch["requests"]
    assert request["path"] == str(model) and request["args"] == ["--max-model-len", "256"]


def test_the_request_carries_the_repairs_arguments_and_environment(tmp_path, models, env, env_for_tests, engine):
    """A transformers-5 Llama on nv-a100 (transformers 4.57): R3/R3b's tokenizer overlay and R5's
    --hf-overrides reach the build, as they reach `vllm serve`."""
    model = shutil.copytree(models("v5-generic"), tmp_path / "v5-builds")
    env = dict(env, COMPAT_ENGINE_PYTHON_NEXT=env_for_tests["COMPAT_ENGINE_PYTHON_NEXT"])  # nv-a100's engine alone
    result = run_common(["doctor", str(model), "--card", "nv-a100", "--json", "--", "--max-model-len", "256"], env)
    data = json.loads(result.stdout)
    assert data["verdict"] == "starts", data["findings"]
    [batch] = engine[1]()  # nv-a100's (nv-a100@next has no engine Python here)
    [request] = batch["requests"]
    assert request["path"] == str(model) and request["args"] == data["args"] + ["--max-model-len", "256"]
    assert "--tokenizer" in request["args"] and "--hf-overrides" in request["args"]
    assert request["env"] == data["env"]


def test_a_dead_engine_process_leaves_the_build_unverified(tmp_path, models, env):
    model = clean_model(models, tmp_path / "llama-dies")
    data = json.loads(run_common(["doctor", str(model), "--card", "nv-a100@next", "--json"], env).stdout)
    assert data["verdict"] == "unverified" and data["unverified"] == ["MB"], data
    [finding] = [f for f in data["findings"] if f["code"] == "MB"]
    assert "the engine process gave no answer (verification exited 3" in finding["message"]


def test_compat_skip_mb_builds_nothing_and_leaves_the_verdict_unverified(tmp_path, models, env, engine):
    """A skipped proof is not a passed one: with MB turned off, the engine is never asked (this
    model's build it would refuse), and the verdict is "unverified" naming COMPAT_SKIP, not "starts"."""
    model = clean_model(models, tmp_path / "llama-refused")
    skip = dict(env, COMPAT_SKIP="mb")
    result = run_common(["doctor", str(model), "--card", "nv-a100@next", "--json"], skip)
    data = json.loads(result.stdout)
    assert result.returncode == 2 and data["verdict"] == "unverified", data
    assert data["unverified"] == ["MB"] and data["failing"] == [] and [f for f in data["findings"] if f["code"] == "MB"] == [SKIPPED_MB]
    assert "which no runtime rule has" not in result.stderr  # MB is a code COMPAT_SKIP knows
    text = run_common(["doctor", str(model), "--card", "nv-a100@next"], skip).stdout
    assert f"| MB | {SKIPPED_MB['message']} | - | unverified |" in text and "verdict: unknown: MB could not be verified here" in text
    # Many models: every row unverified with the same finding, and no model-build process started.
    folder = tmp_path / "models"
    for name in ("a-refused", "b-builds"):
        clean_model(models, folder / name)
    result = run_common(["doctor", str(folder), "--card", "nv-a100@next", "--json"], skip)
    rows = json.loads(result.stdout)["rows"]
    assert (
        result.returncode == 2
        and [(r["verdict"], r["unverified"], r["findings"]) for r in rows] == [("unverified", ["MB"], [SKIPPED_MB])] * 2
    )
    assert "the engine's model classes of" not in result.stderr
    assert engine[1]() == []


def test_a_skipped_build_adds_a_finding_only_where_there_was_a_model_to_build(tmp_path):
    clean, failing = plan(tmp_path), plan(tmp_path)
    failing.add_finding("R4", "error", "not supported")
    unread = plan(tmp_path, facts={})
    model_build.check([clean, failing, unread], {"COMPAT_SKIP": "R2,Mb"})
    assert [f.to_json() for f in clean.findings] == [SKIPPED_MB]
    assert [f.code for f in failing.findings] == ["R4"] and unread.findings == []  # a failing verdict stays "fails"


def test_an_engine_python_without_vllm_cannot_tell(tmp_path, models):
    """The dev venv has torch and transformers, no vLLM: the engine side says so (ok null), in a
    process that keeps torch on."""
    model = clean_model(models, tmp_path / "llama")
    [verdict] = run_checks(
        [{"kind": "model_build", "path": str(model), "args": [], "env": {}, "register_plugin": False}],
        dict(os.environ, COMPAT_ENGINE_PYTHON=sys.executable),
    )
    assert verdict.ok is None and "vLLM is not importable" in verdict.reason, verdict
    assert verdict.result["kind"] == "model_build" and verdict.result["stage"] == "harness"


# ---- triage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "ValueError: Unsupported activation: gelu. Only silu is supported for now.",
        "ValueError: Gemma2 uses `gelu_pytorch_tanh` as the hidden activation function. Please set `hidden_activation` to `gelu_pytorch_tanh`.",
        "ValueError: Gemma 4 backport: bidirectional attention over all tokens is not supported on this engine (not a causal LM)",
        "    assert self.total_num_kv_heads % tp_size == 0",
        "ValueError: Total number of attention heads (4) must be divisible by tensor parallel size (3).",
    ],
)
def test_triage_maps_the_engines_refusal_in_a_log_to_mb(tmp_path, line):
    log = tmp_path / "nv-a100.log"
    log.write_text(
        f"INFO 12-03 10:04:34 [model.py:547] Resolved architecture: LlamaForCausalLM\nTraceback (most recent call last):\n{line}\n"
    )
    verdict = triage_file(str(log))
    assert verdict.code == "MB" and verdict.evidence == line.strip()


# ---- the engine side: who refused ---------------------------------------------------------------

FAKE_VLLM = {
    "__init__.py": "",
    "model_executor/__init__.py": "",
    "model_executor/models/__init__.py": "",
    "model_executor/models/llama.py": "def build():\n    raise ValueError('Unsupported activation: gelu.')\n",
    "model_executor/models/gemma2.py": "import torch_like\ndef build():\n    torch_like.empty()\n",
    "model_executor/layers/__init__.py": "",
    "model_executor/layers/fused_moe/__init__.py": "def build():\n    raise NotImplementedError('no CPU kernel')\n",
    "model_executor/layers/fla.py": "raise AttributeError(\"module 'triton.language' has no attribute 'exp'\")\n",
    # vLLM 0.32's kernel choices when none fits, in its words: each backend tried, with its reason.
    "model_executor/layers/fused_moe/oracle.py": (
        "def build():\n    raise NotImplementedError('No MXFP4 MoE backend supports the deployment configuration. weight_key=kMxfp4Static. "
        "Candidate backends were: [\\'MARLIN\\', \\'CPU\\']. Unsupported reasons: backend: MARLIN, reason: kernel does not support "
        "current device cpu; backend: CPU, reason: kernel does not support current device cpu; backend: EMULATION, reason: kernel "
        "requires amd-quark package.')\n"
    ),
    "model_executor/layers/quantization/__init__.py": "",
    "model_executor/layers/quantization/fp8_utils.py": (
        "def validate_fp8_block_shape():\n    raise ValueError('Weight output_partition_size = 576 is not divisible by weight "
        "quantization block_n = 128.')\n"
    ),
    "model_executor/kernels/__init__.py": "",
    "model_executor/kernels/linear.py": (
        "def build():\n    raise ValueError('Failed to find a kernel that can implement the ScaledMM linear layer. Reasons: \\n"
        "CutlassFP8ScaledMMLinearKernel requires CUDA.\\nCPUFp8W8A8BlockScaledMMKernel requires AMX tile support (Sapphire Rapids "
        "or newer)..\\n')\n"
    ),
    "platforms/__init__.py": "",
    "platforms/cpu.py": "def build():\n    raise ValueError('CPU backend only supports V1.')\n",
    "config/__init__.py": "",
    "config/model.py": (
        "def verify_with_parallel_config():\n    raise ValueError('Total number of attention heads (4) must be divisible by tensor parallel size (3).')\n"
        "def other_check():\n    raise ValueError('chunked prefill is not supported here')\n"
    ),
}


@pytest.fixture
def judge(tmp_path, monkeypatch):
    """engine_checks/model_build.py's judgement of an exception raised in a fake vLLM package."""
    root = tmp_path / "fake"
    for name, text in dict(FAKE_VLLM, **{"../torch_like.py": "def empty():\n    raise RuntimeError('negative dimension -1')\n"}).items():
        path = root / "vllm" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.") or m == "torch_like"]:
        monkeypatch.delitem(sys.modules, name)
    spec = importlib.util.spec_from_file_location("_mb_engine_side", ROOT / "common" / "engine_checks" / "model_build.py")
    side = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(side)

    def run(module: str, function: str = "build", stage: str = "model") -> dict:
        import importlib

        importlib.import_module("vllm")
        try:
            getattr(importlib.import_module(module), function)()
        except Exception as exc:
            return side._judged(exc, stage, "9.9")
        raise AssertionError("nothing raised")

    yield run
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.") or m == "torch_like"]:
        del sys.modules[name]


def test_the_engine_side_tells_the_models_refusal_from_what_it_cannot_judge(judge):
    refused = judge("vllm.model_executor.models.llama")
    assert refused["ok"] is False and refused["error"]["file"] == "vllm/model_executor/models/llama.py" and refused["error"]["line"] == 2
    assert refused["reason"] == (
        "vLLM 9.9's model code refuses this configuration: ValueError: Unsupported activation: gelu. "
        "(vllm/model_executor/models/llama.py:2, in build)"
    )
    # Raised below the model code (torch's frames): the model code's frame is the one named.
    deeper = judge("vllm.model_executor.models.gemma2")
    assert deeper["ok"] is False and deeper["error"]["file"] == "vllm/model_executor/models/gemma2.py"
    # A block-quantized weight whose shard at the tensor-parallel size is not whole blocks: checked
    # in the quantization code, before any kernel is chosen, the same on every platform.
    blocks = judge("vllm.model_executor.layers.quantization.fp8_utils", "validate_fp8_block_shape")
    assert blocks["ok"] is False and blocks["reason"].startswith("vLLM 9.9's model code refuses this configuration: ValueError: Weight"), (
        blocks
    )
    heads = judge("vllm.config.model", "verify_with_parallel_config", stage="config")
    assert heads["ok"] is False and heads["reason"].startswith("vLLM 9.9's config check refuses this configuration: ValueError: Total")
    for module, function, stage in (
        ("vllm.platforms.cpu", "build", "model"),  # the CPU platform is not the card's
        ("vllm.model_executor.layers.fused_moe", "build", "model"),  # nor are its kernels
        ("vllm.model_executor.layers.fla", "build", "config"),  # an import fails whatever the model
        ("vllm.config.model", "other_check", "config"),
    ):
        answer = judge(module, function, stage)
        assert answer["ok"] is None and answer["reason"].startswith("cannot tell: "), answer


def test_where_the_cpu_build_has_no_kernel_the_verdict_names_the_cpu_kernels_reason(judge):
    """A quantized layer or MoE whose kernel the CPU build lacks (block-scaled FP8 without AMX tiles,
    MXFP4 MoE): cannot tell, said with the engine's first sentence and the CPU kernels' own
    reasons, not the card's kernels listed beside them."""
    import torch

    machine = " (this machine's CPU has no AMX tiles)" if not torch.cpu._is_amx_tile_supported() else ""
    moe = judge("vllm.model_executor.layers.fused_moe.oracle")
    assert moe["ok"] is None and moe["reason"] == (
        "cannot tell: the CPU build here has no kernel for this, the card runs its own: NotImplementedError: No MXFP4 MoE backend "
        "supports the deployment configuration (vllm/model_executor/layers/fused_moe/oracle.py:2, in build); the CPU build's: CPU: "
        "kernel does not support current device cpu" + machine
    )
    fp8 = judge("vllm.model_executor.kernels.linear")
    assert fp8["ok"] is None and fp8["reason"] == (
        "cannot tell: the CPU build here has no kernel for this, the card runs its own: ValueError: Failed to find a kernel that can "
        "implement the ScaledMM linear layer (vllm/model_executor/kernels/linear.py:2, in build); the CPU build's: "
        "CPUFp8W8A8BlockScaledMMKernel: requires AMX tile support (Sapphire Rapids or newer)" + machine
    )
    assert "Cutlass" not in fp8["reason"] and "MARLIN" not in moe["reason"]
