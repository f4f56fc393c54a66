"""R8 on the real engines: MoE experts stored fused by transformers 5 (`save_original_format=False`).

A tiny Mixtral (4 experts, 2 per token) saved by transformers 5 with its experts fused:
1. vanilla vLLM 0.11.0 dies loading it with `KeyError: 'layers.0.mlp.experts.down_proj'`, and
   `triage` on that log says R8 (one start, ~20 s);
2. the launcher (nv-a100) plans R8 next to the transformers-5 tokenizer and config repairs; the
   engine loads the image's plugin from the repair's PYTHONPATH and serves the greedy tokens of
   transformers 5's own `generate` on the same weights (one start, ~40 s);
3. on each engine generation (0.5.5, 0.11.0, 0.32.0), without starting a server: with the repair's
   environment the engine's own `load_general_plugins()` wraps its weight iterator, which then yields
   for a fused Mixtral and a fused Qwen3-MoE exactly the tensors (names, shapes, bytes) of the same
   model saved in the original per-expert format. vLLM 0.32 needs it too: it fails on a fused
   Mixtral by itself (`There is no module or parameter named 'layers.0.mlp' in MixtralModel`).
"""

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from common.rules.support.plugin import PLUGIN_DIR
from common.triage import triage_file
from harness.engine import ENGINE_0110, ENGINES, free_port
from harness.fixtures.factory import author_record, build

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason),
]

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "r8_weights_probe.py"
GREEDY = ["--dtype", "float32"]  # the reference tokens come from transformers' own generate in float32
SEED_ARGS = ("--initializer-range", "0.1")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The same seeded weights saved twice by transformers 5: experts fused, and per expert."""
    base = tmp_path_factory.mktemp("r8")
    made = {}
    for model_type, shards in (("mixtral", ()), ("qwen3_moe", ("--max-shard-size", "1MB"))):
        args = (*SEED_ARGS, "--model-type", model_type, *shards)
        extra = ("--reference-tokens", "16") if model_type == "mixtral" else ()
        made[model_type, "fused"] = build("v5", "generic", base / f"{model_type}-fused", *args, "--fused-experts", *extra)
        made[model_type, "original"] = build("v5", "generic", base / f"{model_type}-original", *args)
    return made


def test_vanilla_vllm_0_11_dies_on_fused_experts_and_triage_says_r8(models, server, served_models):
    model = models["mixtral", "fused"]
    port = free_port()
    # A tokenizer 4.57 reads (same vocabulary): only the experts' layout is left to fail.
    argv = ENGINE_0110.serve_argv_vanilla(model, port) + ["--tokenizer", str(served_models("457-generic"))] + GREEDY
    vanilla = server(argv, ENGINE_0110.env(), "vanilla")
    assert vanilla.wait_ready() is False and vanilla.wait_exit() != 0
    assert "KeyError: 'layers.0.mlp.experts.down_proj'" in vanilla.log()
    assert triage_file(str(vanilla.log_path)).code == "R8"


def test_launcher_serves_fused_experts_with_transformers5_greedy_tokens(models, launched, tmp_path):
    model = models["mixtral", "fused"]
    author = author_record(model)
    srv, report = launched(ENGINE_0110, "nv-a100", model, tmp_path / "work", *GREEDY)
    [r8] = [r for r in report["repairs"] if r["code"] == "R8"]
    assert r8["verified"] is True and report["env"]["COMPAT_FUSED_EXPERTS"] == "mixtral"
    assert report["env"]["PYTHONPATH"].split(":")[0] == PLUGIN_DIR
    log = srv.log()
    assert (
        "compat_weights: vllm.model_executor.model_loader.default_loader.DefaultModelLoader wraps the weights (fused_experts=mixtral)"
        in log
    )
    assert "compat_weights: split 4 fused expert tensors into per-expert weights (layout mixtral)" in log
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]


def original_tensors(model: Path) -> dict:
    """{name: [shape, sha256 of float32 bytes]} of a checkpoint read directly, as the probe reports."""
    import torch
    from safetensors.torch import load_file

    tensors = {}
    for path in sorted(model.glob("*.safetensors")):
        for name, tensor in load_file(str(path)).items():
            data = tensor.to(torch.float32).contiguous().numpy().tobytes()
            tensors[name] = [list(tensor.shape), hashlib.sha256(data).hexdigest()]
    return tensors


@pytest.mark.parametrize("version", sorted(ENGINES))
def test_each_engines_weight_iterator_yields_the_original_layout(models, tmp_path, version):
    engine = ENGINES[version]
    if not engine.available():
        pytest.skip(engine.missing_reason)
    for model_type, layout in (("mixtral", "mixtral"), ("qwen3_moe", "qwen2_moe")):
        out = tmp_path / f"{model_type}.json"
        env = engine.env({"PYTHONPATH": PLUGIN_DIR, "COMPAT_FUSED_EXPERTS": layout})
        proc = subprocess.run(
            [str(engine.python), str(PROBE), str(models[model_type, "fused"]), str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        probe = json.loads(out.read_text())
        assert probe["wrapped"] == {"fused_experts": layout}  # the engine's own plugin loading found and ran it
        want = original_tensors(models[model_type, "original"])
        assert sorted(probe["tensors"]) == sorted(want)
        assert probe["tensors"] == want
