"""Memory without weights: a directory of config.json and tokenizer only (what users look at before
they download) has its weights estimated from config.json's shapes (common/memory/weight_estimate.py),
held against the exact figure the safetensors headers of the same config give, and judged by
doctor's memory check as weights from headers are, saying "estimated"."""

import json
import os
from pathlib import Path

import pytest

from common.memory.memory_fit import assess, summary
from common.model.modeldir import ModelDir
from common.engine.profile import load_profile
from common.engine.vllm_args import UserArgs
from common.memory.weight_bytes import read_weights
from common.memory.weight_estimate import estimate_weights
from harness.fixtures.shapes import DEEPSEEK_V3, GATED_DELTA_ATTENTION, LLAMA_31_8B, MIXTRAL_8X7B, QWEN25_7B, SHAPES, TINY, write_model

from common.tests.helpers import run_common

GIB = 1 << 30
ESTIMATED = "estimated from config.json"
# Qwen2.5-32B's published shapes (32.8B parameters, 61 GiB in bfloat16).
QWEN25_32B = dict(QWEN25_7B, hidden_size=5120, intermediate_size=27648, num_attention_heads=40, num_key_value_heads=8, num_hidden_layers=64)


@pytest.fixture(scope="module")
def headers(tmp_path_factory):
    """name -> (a model of SHAPES with its safetensors headers, the same config.json alone)."""
    base = tmp_path_factory.mktemp("estimate")
    made = {}
    for name, config in SHAPES.items():
        bare = base / "bare" / name
        bare.mkdir(parents=True)
        (bare / "config.json").write_text(json.dumps(config))
        made[name] = (write_model(base / "full" / name, config), bare)
    return made


def bare_model(path: Path, config: dict) -> Path:
    """config.json and a tokenizer, no weights: how a model looks before its download."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    return path


def judged(model: Path, card: str, args, env=None):
    return assess(ModelDir(str(model)), load_profile(card), UserArgs(args), env or {})


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_the_estimate_is_within_2_percent_of_the_headers_on_every_shape(headers, name):
    """Dense, GQA, biases, MoE, MLA with FP8 blocks: total, per decoder layer, first and last stage."""
    full, _ = headers[name]
    config = SHAPES[name]
    exact = read_weights(ModelDir(str(full)), config)
    estimate, why = estimate_weights(config)
    assert estimate is not None, why
    assert estimate.source == ESTIMATED and estimate.estimated and not exact.estimated
    assert abs(estimate.total - exact.total) <= 0.02 * exact.total, (estimate.total, exact.total)
    assert sorted(estimate.layers) == sorted(exact.layers)
    for layer, size in exact.layers.items():
        assert abs(estimate.layers[layer] - size) <= 0.02 * size, (layer, estimate.layers[layer], size)
    assert abs(estimate.first - exact.first) <= 0.02 * exact.first and abs(estimate.last - exact.last) <= 0.02 * exact.last
    # The same split across ranks and stages as from headers.
    for tp, stages in ((8, [(0, len(exact.layers))]), (2, [(0, 10), (10, len(exact.layers))])):
        for got, want in zip(estimate.per_device(tp, stages), exact.per_device(tp, stages), strict=True):
            assert abs(got - want) <= 0.02 * want


@pytest.mark.parametrize("card", ["iluvatar-bi100", "nv-a100"])
def test_the_judgement_from_the_estimate_is_the_one_from_the_headers(headers, card):
    """OOM, KV and the smallest tensor-parallel size, from config.json alone, as from the headers."""
    for name, (full, bare) in headers.items():
        for args in ([], ["--max-model-len", "8192"], ["-tp", "2", "--max-model-len", "131072"]):
            exact, estimate = judged(full, card, args), judged(bare, card, args)
            assert estimate.weights.estimated and estimate.to_json()["estimated"] is True
            assert (estimate.fits, estimate.judged.code, estimate.smallest_tp) == (exact.fits, exact.judged.code, exact.smallest_tp), (
                name,
                args,
            )
            assert "estimated" not in exact.to_json()


def test_a_metadata_only_32b_does_not_start_on_one_bi100_and_doctor_names_four(tmp_path, env_for_tests):
    """Qwen2.5-32B before its 61 GiB download: one 32 GiB BI-100 cannot hold its weights; two
    cannot either (30.5 GiB a rank, of the 28.8 the utilization grants); four can."""
    model = bare_model(tmp_path / "qwen2.5-32b", QWEN25_32B)
    card = "iluvatar-bi100"
    assert load_profile(card).device["memory_gib"] == 32 and load_profile(card).device["per_node"] == 8
    one = judged(model, card, ["--tensor-parallel-size", "1"])
    assert one.fits is False and one.judged.code == "OOM" and one.smallest_tp == 4
    assert 60 < one.weights.total / GIB < 62 and one.weights.source == ESTIMATED
    assert judged(model, card, ["--tensor-parallel-size", "2"]).judged.code == "OOM"
    assert judged(model, card, ["--tensor-parallel-size", "4"]).fits is True
    line = summary(one.to_json())
    assert line.startswith("OOM: TP 4 holds") and "estimated from config.json" in line
    # doctor: the start fails with OOM, naming the tensor-parallel size that holds it.
    proc = run_common(["doctor", str(model), "--card", card, "--json", "--", "--tensor-parallel-size", "1"], env_for_tests)
    data = json.loads(proc.stdout)
    memory = data["memory"]
    assert data["verdict"] == "fails" and "OOM" in data["failing"], data["findings"]
    assert memory["fits"] is False and memory["code"] == "OOM" and memory["smallest_tp"] == 4
    assert memory["estimated"] is True and memory["weights_source"] == ESTIMATED and 60 < memory["weights_gib"] < 62
    [oom] = [f for f in data["findings"] if f["code"] == "OOM"]
    assert "--tensor-parallel-size 4 on a node of 8" in oom["message"] and "estimated from config.json" in oom["message"]
    proc = run_common(["doctor", str(model), "--card", card, "--", "--tensor-parallel-size", "1"], env_for_tests)
    assert proc.returncode == 1 and "memory: OOM: TP 4 holds" in proc.stdout and "estimated from config.json" in proc.stdout
    # Without the platform's arguments: the smallest tensor-parallel size of the node, said as estimated.
    data = json.loads(run_common(["doctor", str(model), "--card", card, "--json"], env_for_tests).stdout)
    assert data["memory"]["tensor_parallel_size"] == 4 and data["memory"]["estimated"] is True
    # Red line 1: the model directory is never written.
    assert sorted(os.listdir(model)) == ["config.json", "tokenizer_config.json"]


def test_an_index_without_its_files_is_metadata_only_too(tmp_path):
    """`download --include "*.json"` brings the shards' index and none of the shards: estimated,
    not weights of 0 bytes; nor is a half-downloaded one counted by the shards it has (its
    missing shards would promise a fit the checkpoint does not have)."""
    model = write_model(tmp_path / "8b", LLAMA_31_8B)
    exact = judged(model, "nv-a100", [])
    shards = sorted(model.glob("*.safetensors"))
    for shard in shards[1:]:
        shard.unlink()
    partial = judged(model, "nv-a100", [])
    assert partial.weights.estimated and partial.weights.total == exact.weights.total
    shards[0].unlink()
    assert (model / "model.safetensors.index.json").exists()
    got = judged(model, "nv-a100", [])
    assert got.weights.estimated and got.weights.total == exact.weights.total and got.fits is True
    bins = tmp_path / "bin"
    bins.mkdir()
    (bins / "config.json").write_text(json.dumps(LLAMA_31_8B))
    (bins / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"lm_head.weight": "pytorch_model-00001-of-00002.bin"}}))
    assert judged(bins, "nv-a100", []).weights.estimated


def test_what_the_estimate_reads_beyond_the_fixture_shapes():
    """Tied embeddings, a nested text_config with its vision tower, Qwen-MoE's sparse step and
    gated shared expert, linear-attention layers, quantized checkpoints, --dtype and online
    --quantization."""
    base = estimate_weights(LLAMA_31_8B)[0]
    tied = estimate_weights(dict(LLAMA_31_8B, tie_word_embeddings=True))[0]
    assert base.total - tied.total == 128256 * 4096 * 2 and tied.last == 4096 * 2
    assert estimate_weights(LLAMA_31_8B, dtype_arg="float32")[0].total == 2 * base.total
    fp8 = estimate_weights(LLAMA_31_8B, quantization="fp8")[0]
    assert fp8.first == base.first and 0.5 < fp8.layers[0] / base.layers[0] < 0.51
    # A VLM: the language model of text_config, the vision tower on the first stage.
    vision = {"depth": 32, "hidden_size": 1280, "intermediate_size": 5120}
    vlm = {"model_type": "qwen2_vl", "text_config": dict(QWEN25_7B, model_type="qwen2_vl_text"), "torch_dtype": "bfloat16"}
    text_only = estimate_weights(vlm)[0]
    assert text_only.total == estimate_weights(QWEN25_7B)[0].total
    with_tower = estimate_weights(dict(vlm, vision_config=vision))[0]
    assert with_tower.first - text_only.first == 32 * (4 * 1280 * 1280 + 2 * 1280 * 5120 + 4 * 1280) * 2
    assert any("vision tower is estimated" in note for note in with_tower.problems)
    unsized = estimate_weights(dict(vlm, vision_config={"model_type": "siglip"}))[0]
    assert unsized.total == text_only.total and any("not counted" in note for note in unsized.problems)
    # Qwen2-MoE: every second layer sparse, one layer listed dense, a gated shared expert.
    moe = dict(QWEN25_7B, model_type="qwen2_moe", num_experts=8, moe_intermediate_size=512, decoder_sparse_step=2, mlp_only_layers=[3])
    moe = dict(moe, shared_expert_intermediate_size=1024, num_hidden_layers=4)
    got = estimate_weights(moe)[0]
    dense = estimate_weights(dict(moe, num_experts=0))[0]
    assert got.layers[0] == got.layers[2] == dense.layers[0] and got.layers[3] == dense.layers[3]
    experts = 8 * 3 * 3584 * 512 + 8 * 3584 + 3 * 3584 * 1024 + 3584
    assert got.layers[1] - dense.layers[1] == (experts - 3 * 3584 * 18944) * 2
    # Qwen3.5-MoE-like: linear-attention layers sized, every layer sparse, no intermediate_size.
    qwen35 = {
        "model_type": "qwen3_5_moe",
        "text_config": {
            **GATED_DELTA_ATTENTION,
            "model_type": "qwen3_5_moe_text",
            "hidden_size": 2048,
            "num_hidden_layers": 40,
            "num_experts": 256,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "vocab_size": 248320,
            "tie_word_embeddings": False,
        },
        "torch_dtype": "bfloat16",
    }
    a3b, why = estimate_weights(qwen35)
    assert a3b is not None, why
    assert 33 < a3b.total / 2 / 1e9 < 36 and a3b.layers[0] != a3b.layers[3]  # a 35B-A3B
    # Quantized checkpoints: GPTQ's 4 bits with their group scales, bitsandbytes, MXFP4 experts.
    gptq = estimate_weights(dict(LLAMA_31_8B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128}))[0]
    assert 0.25 < gptq.layers[0] / base.layers[0] < 0.27 and gptq.first == base.first
    bnb = estimate_weights(dict(LLAMA_31_8B, quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True}))[0]
    assert 0.28 < bnb.layers[0] / base.layers[0] < 0.29
    mx = estimate_weights(dict(MIXTRAL_8X7B, quantization_config={"quant_method": "mxfp4"}))[0]
    full = estimate_weights(MIXTRAL_8X7B)[0]
    assert 0.27 < mx.layers[0] / full.layers[0] < 0.29
    # DeepSeek-V3 without its FP8: every weight at two bytes, about twice the FP8 checkpoint.
    bf16 = estimate_weights({k: v for k, v in DEEPSEEK_V3.items() if k != "quantization_config"})[0]
    assert 1.9 < bf16.total / estimate_weights(DEEPSEEK_V3)[0].total < 2.0


BAD_VALUES = ("4096", -1, 0, True, 4096.5, 10**30, [4096], {"a": 1}, None)


def test_a_malformed_config_is_not_judged_and_says_why(tmp_path):
    """Strings, negatives, bools, huge numbers, missing keys: no estimate, a reason, never an exception."""
    cases = {
        "hidden_size": "4096",
        "num_hidden_layers": -3,
        "vocab_size": True,
        "intermediate_size": 10**30,
        "num_attention_heads": None,
        "tie_word_embeddings": "false",
        "quantization_config": "fp8",
    }
    for key, value in cases.items():
        config = dict(LLAMA_31_8B, **{key: value})
        weights, why = estimate_weights(config)
        assert weights is None and why, (key, value)
        assert key in why or "head size" in why or "quantization_config" in why, (key, why)
        model = bare_model(tmp_path / key, config)
        got = judged(model, "iluvatar-bi100", ["--max-model-len", "8192"])
        assert got.fits is None and got.reason.startswith("no weight files (metadata only), and no estimate from config.json: ")
        assert summary(got.to_json()).startswith("not judged (no weight files")
    missing = {k: v for k, v in LLAMA_31_8B.items() if k != "vocab_size"}
    assert "vocab_size" in estimate_weights(missing)[1]
    assert estimate_weights({})[1] and estimate_weights([])[1]  # type: ignore[arg-type]
    # Every key of each shape, and of nested and quantized ones, spoiled in every way: a reason or an estimate, never a raise.
    qwen_moe = dict(QWEN25_7B, model_type="qwen2_moe", num_experts=8, moe_intermediate_size=512, mlp_only_layers=[1])
    gptq = dict(LLAMA_31_8B, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    vlm = {"model_type": "llava", "text_config": dict(TINY), "vision_config": {"hidden_size": 64, "num_hidden_layers": 2}}
    for config in [*SHAPES.values(), qwen_moe, gptq, vlm]:
        for key in config:
            for bad in BAD_VALUES:
                weights, why = estimate_weights(dict(config, **{key: bad}))
                assert (weights is None) == bool(why), (key, bad)
        for sub in ("quantization_config", "text_config", "vision_config"):
            for key in config.get(sub) or {}:
                for bad in BAD_VALUES:
                    weights, why = estimate_weights(dict(config, **{sub: dict(config[sub], **{key: bad})}))
                    assert (weights is None) == bool(why), (sub, key, bad)
