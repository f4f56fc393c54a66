"""doctor knows whether the model fits the card (rule KV, common/memory/memory_fit.py): the weights from
the safetensors headers, the KV cache of one request from config.json, by each engine's own rule,
against the card's device and node. Models are metadata-only, made by code (sparse files)."""

import json
import struct
from pathlib import Path

import pytest

from common.model import safetensors_header
from common.memory.kv_cache import layout
from common.memory.memory_fit import Device, assess, summary
from common.model.modeldir import ModelDir
from common.start.preflight import build_plan
from common.engine.profile import load_profile
from common.rules.support.base import Context
from common.rules.kv_memory import RULE
from common.engine.vllm_args import UserArgs
from harness.fixtures.shapes import (
    GATED_DELTA_ATTENTION,
    LLAMA_31_8B,
    LLAMA_31_70B,
    LLAMA_31_405B,
    TINY,
    disk_bytes,
    safetensors_file,
    write_model,
)

from common.tests.helpers import run_common

GIB = 1 << 30


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    base = tmp_path_factory.mktemp("shapes")
    made = {}

    def get(name, config):
        if name not in made:
            made[name] = write_model(base / name, config)
        return made[name]

    return get


def findings(model: Path, card: str, args, env=None):
    ctx = Context(ModelDir(str(model)), load_profile(card), {}, UserArgs(args), env or {}, doctor=True)
    outcome = RULE.check(ctx)
    return [f.to_json() for f in outcome.findings], ctx.facts.get("memory")


def judged(model: Path, card: str, args, env=None):
    return assess(ModelDir(str(model)), load_profile(card), UserArgs(args), env or {})


# -- the cases of issue 30 -----------------------------------------------------------------------


def test_a_70b_fails_on_one_bi100_and_one_a100_and_fits_on_eight_bi100s_at_8k(shapes):
    model = shapes("70b", LLAMA_31_70B)
    assert disk_bytes(model) < 10 * 1024 * 1024  # 141 GB of weights declared, none written
    for card in ("iluvatar-bi100", "nv-a100"):
        [finding], memory = findings(model, card, ["--max-model-len", "8192"])
        assert finding["code"] == "OOM" and finding["severity"] == "error", finding
        assert 131 < memory["weights_gib"] < 132 and memory["fits"] is False
        assert "--tensor-parallel-size" in finding["message"] and "holds --max-model-len 8192" in finding["message"]
    found, memory = findings(model, "iluvatar-bi100", ["--tensor-parallel-size", "8", "--max-model-len", "8192"])
    assert found == [] and memory["fits"] is True and memory["devices"] == 8
    assert 16 < memory["per_device"]["weights_gib"] < 17


def test_an_8b_fails_for_its_kv_cache_at_131072_on_one_bi100_and_fits_at_8192(shapes):
    model = shapes("8b", LLAMA_31_8B)
    [finding], memory = findings(model, "iluvatar-bi100", ["--max-model-len", "131072"])
    assert finding["code"] == "KV" and finding["severity"] == "error"
    assert memory["per_device"]["kv_needed_gib"] == 16.0 and memory["kv_gib"] == 16.0  # 128 KiB a token
    # The fix names what fits: two BI-100s at 131072, or the longest length one holds.
    assert "--tensor-parallel-size 2 on a node of 8 holds --max-model-len 131072" in finding["message"]
    assert f"is {memory['largest_max_model_len']}" in finding["message"] and 8192 < memory["largest_max_model_len"] < 131072
    assert findings(model, "iluvatar-bi100", ["--max-model-len", "8192"])[0] == []
    # The engine refuses the length doctor names plus one, and takes it.
    longest = memory["largest_max_model_len"]
    assert judged(model, "iluvatar-bi100", ["--max-model-len", str(longest)]).fits is True
    assert judged(model, "iluvatar-bi100", ["--max-model-len", str(longest + 1)]).fits is False


def test_a_tiny_model_is_unchanged(shapes, tmp_path):
    """Weights or none, a tiny model's plan is the same, and it fits one device of every card
    (with none, its weights estimated from config.json: the same bytes as its headers')."""
    with_weights = shapes("tiny", TINY)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps(TINY))
    for card in ("iluvatar-bi100", "nv-a100", "hygon-k100"):
        found, memory = findings(with_weights, card, [])
        assert found == [] and memory["fits"] is True and memory["smallest_tp"] == 1
        assert findings(with_weights, card, ["--max-model-len", "512"])[0] == []
        found, memory = findings(bare, card, [])
        headers = findings(with_weights, card, [])[1]
        assert found == [] and memory["fits"] is True and memory["estimated"] is True and "estimated" not in headers
        assert memory["weights_source"] == "estimated from config.json" and memory["weights_gib"] == headers["weights_gib"]


def test_without_arguments_doctor_names_the_smallest_tensor_parallel_size_of_a_node(shapes):
    model = shapes("70b", LLAMA_31_70B)
    [note], memory = findings(model, "iluvatar-bi100", [])
    assert note["severity"] == "info" and "--tensor-parallel-size 8 on a node of 8" in note["message"]
    assert memory["smallest_tp"] == 8 and memory["max_model_len"] == 131072
    assert findings(model, "nv-a100", [])[1]["smallest_tp"] == 4
    # ... and fails only where a whole node cannot hold the model: 810 GB of a 405B.
    huge = shapes("405b", LLAMA_31_405B)
    for card in ("iluvatar-bi100", "nv-a100", "hygon-k100"):
        [finding], memory = findings(huge, card, [])
        assert finding["code"] == "OOM" and "a whole node" in finding["message"] and memory["smallest_tp"] is None
        assert "no tensor-parallel size of a node of 8 holds it" in finding["message"]


def test_the_card_device_is_overridable(shapes):
    """The A100 the platform runs is the 80 GB one; COMPAT_DEVICE_MEMORY_GIB=40 judges a 40 GB node."""
    model = shapes("70b", LLAMA_31_70B)
    assert judged(model, "nv-a100", []).smallest_tp == 4
    assert judged(model, "nv-a100", [], {"COMPAT_DEVICE_MEMORY_GIB": "40"}).smallest_tp == 8
    assert judged(model, "nv-a100", [], {"COMPAT_DEVICES_PER_NODE": "4", "COMPAT_DEVICE_MEMORY_GIB": "40"}).fits is False
    assert judged(model, "nv-a100", [], {"COMPAT_DEVICE_MEMORY_GIB": "lots"}).smallest_tp == 4  # not a number: the card's


def test_the_platform_arguments_that_decide_memory(shapes):
    model = shapes("8b", LLAMA_31_8B)
    card = "iluvatar-bi100"
    base = judged(model, card, ["--max-model-len", "131072"])
    assert base.fits is False
    assert judged(model, card, ["-tp", "2", "--max-model-len", "131072"]).fits is True
    assert judged(model, card, ["--tensor-parallel-size=2", "--max-model-len=131072"]).fits is True
    # Two pipeline stages hold half the layers each (and their KV cache).
    assert judged(model, card, ["--pipeline-parallel-size", "2", "--max-model-len", "131072"]).fits is True
    # An fp8 KV cache halves it; float32 weights double them; a higher utilization grants more.
    assert judged(model, card, ["--kv-cache-dtype", "fp8", "--max-model-len", "131072"]).fits is True
    assert judged(model, card, ["--dtype", "float32", "--max-model-len", "8192"]).judged.code == "OOM"
    higher = judged(model, card, ["--gpu-memory-utilization", "0.98", "--max-model-len", "131072"])
    assert higher.judged.space > base.judged.space
    # Online fp8 quantization halves the layers' linear weights (not embeddings, norms, head).
    fp8 = judged(model, card, ["--quantization", "fp8", "--max-model-len", "131072"])
    assert 8 < fp8.judged.weights / GIB < 9 and fp8.fits is True
    # More sequences widen the profiling run's peak (the sampler's logits of each).
    assert judged(model, card, ["--max-num-seqs", "1024", "--max-model-len", "8192"]).judged.activation > base.judged.activation


def test_weights_are_read_from_the_headers_only(shapes, monkeypatch):
    """Every shard's 8-byte length and JSON header, nothing past them (the index names the shards)."""
    model = shapes("70b", LLAMA_31_70B)
    reads = []
    real_open = open

    def counting_open(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        if "b" in mode and str(path).endswith(".safetensors"):
            original = fh.read

            def read(n=-1):
                data = original(n)
                reads.append((Path(path).name, len(data)))
                return data

            fh.read = read
        return fh

    monkeypatch.setattr(safetensors_header, "open", counting_open, raising=False)
    from common.memory import weight_bytes

    weight_bytes._SUMMARIES.clear()
    judged(model, "nv-a100", [])
    shards = sorted(p.name for p in model.glob("*.safetensors"))
    assert len(shards) > 20 and sorted({name for name, _ in reads}) == shards
    for shard in shards:
        with real_open(model / shard, "rb") as fh:
            length = struct.unpack("<Q", fh.read(8))[0]
        assert sum(n for name, n in reads if name == shard) == 8 + length


def test_every_dtype_counts_quantized_ones_as_stored_and_floats_as_served(tmp_path):
    """FP8 with float32 block scales, GPTQ's packed int32 with fp16 scales, FP4 in U8, float32
    cast to the served 2 bytes; a file in one piece or sharded behind an index counts the same."""
    config = dict(TINY, num_hidden_layers=1)
    cases = {
        # (tensors, quantization_config): expected served bytes
        "fp8": (
            [
                ("model.layers.0.mlp.down_proj.weight", "F8_E4M3", [256, 512]),
                ("model.layers.0.mlp.down_proj.weight_scale_inv", "F32", [2, 4]),
            ],
            256 * 512 + 8 * 4,
        ),
        "gptq": (
            [("model.layers.0.mlp.down_proj.qweight", "I32", [64, 256]), ("model.layers.0.mlp.down_proj.scales", "F16", [4, 256])],
            64 * 256 * 4 + 4 * 256 * 2,
        ),
        "fp4": (
            [
                ("model.layers.0.mlp.down_proj.weight", "U8", [256, 256]),
                ("model.layers.0.mlp.down_proj.weight_scale", "F8_E4M3", [256, 32]),
            ],
            256 * 256 + 256 * 32,
        ),
        "f32": ([("model.layers.0.mlp.down_proj.weight", "F32", [256, 512])], 256 * 512 * 2),
    }
    for name, (entries, expected) in cases.items():
        model = tmp_path / name
        model.mkdir()
        quant = {} if name == "f32" else {"quantization_config": {"quant_method": name}}
        (model / "config.json").write_text(json.dumps(dict(config, torch_dtype="float32" if name == "f32" else "bfloat16", **quant)))
        safetensors_file(model / "model.safetensors", entries)
        got = judged(model, "nv-a100", [])
        assert got.weights.total == expected, (name, got.weights.total, expected)
    whole = write_model(tmp_path / "whole", LLAMA_31_8B, shard_bytes=10**12)
    sharded = write_model(tmp_path / "sharded", LLAMA_31_8B)
    assert (whole / "model.safetensors").exists() and (sharded / "model.safetensors.index.json").exists()
    assert judged(whole, "nv-a100", []).weights.total == judged(sharded, "nv-a100", []).weights.total == 8030261248 * 2


def test_a_bin_checkpoint_counts_by_its_size(tmp_path):
    model = tmp_path / "bin"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(dict(LLAMA_31_8B, torch_dtype="float32")))
    with open(model / "pytorch_model.bin", "wb") as fh:
        fh.truncate(32 * 10**9)  # float32 on disk, served as a 2-byte type: half of it
    (model / "training_args.bin").write_bytes(b"x" * 100)
    got = judged(model, "nv-a100", [])
    assert got.weights.total == 16 * 10**9 and "bin" in got.weights.source


# -- the KV cache per token, by the engine's rule ------------------------------------------------


def kv_per_token(config, card, tp=1):
    profile = load_profile(card)
    lay = layout(config, profile.memory)
    return lay, lay.token_bytes(tp, 2)


def test_kv_per_token_gqa_mla_windows_and_linear_attention():
    lay, per = kv_per_token(LLAMA_31_8B, "nv-a100")
    assert per == 32 * 2 * 8 * 128 * 2 and kv_per_token(LLAMA_31_8B, "nv-a100", tp=16)[1] == 32 * 2 * 1 * 128 * 2
    deepseek = {
        "model_type": "deepseek_v2",
        "num_hidden_layers": 60,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "hidden_size": 5120,
    }
    # 0.11 caches MLA's latent (512 + 64) once per token and layer, on every rank; 0.5.5 every
    # head at its padded 256.
    assert kv_per_token(deepseek, "nv-a100")[1] == kv_per_token(deepseek, "nv-a100", tp=8)[1] == 60 * 576 * 2
    assert kv_per_token(deepseek, "iluvatar-bi100")[1] == 60 * 2 * 128 * 256 * 2
    mistral = dict(LLAMA_31_8B, model_type="mistral", sliding_window=4096, rope_scaling=None, max_position_embeddings=32768)
    gemma2 = {
        "model_type": "gemma2",
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "sliding_window": 4096,
    }
    assert kv_per_token(gemma2, "nv-a100")[0].kinds == ["window", "full", "window", "full"]
    assert kv_per_token(mistral, "nv-a100")[0].kinds == ["window"] * 32
    assert kv_per_token(mistral, "iluvatar-bi100")[0].kinds == ["full"] * 32  # 0.5.5 keeps every token
    qwen3_next = dict(GATED_DELTA_ATTENTION, model_type="qwen3_next", num_hidden_layers=4)
    lay, per = kv_per_token(qwen3_next, "nv-a100")
    assert lay.kinds == ["linear", "linear", "linear", "full"] and per == 2 * 2 * 256 * 2
    assert lay.state_bytes(1, 2) == (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2


def test_a_window_bounds_the_kv_cache_on_v1_and_not_on_0_5_5(shapes):
    model = shapes(
        "mistral", dict(LLAMA_31_8B, model_type="mistral", sliding_window=4096, rope_scaling=None, max_position_embeddings=131072)
    )
    a100 = judged(model, "nv-a100", ["--max-model-len", "131072"])
    bi100 = judged(model, "iluvatar-bi100", ["--max-model-len", "131072"])
    # V1: (window - 1 + 2048 batched tokens) in 16-token pages + 1 of each of 32 layers; 0.5.5: all of them.
    assert a100.judged.needed == 32 * (-(-(4095 + 2048) // 16) + 1) * 16 * 4096 and a100.fits is True
    assert bi100.judged.needed == 16 * GIB and bi100.fits is False


# -- where it shows --------------------------------------------------------------------------------


def test_only_doctor_runs_it_a_container_start_does_not(shapes, tmp_path):
    model = shapes("70b", LLAMA_31_70B)
    env = {"COMPAT_WORK_DIR": str(tmp_path / "w")}
    plan = build_plan(str(model), "iluvatar-bi100", ["--max-model-len", "8192"], env, verify=False)
    assert "memory" not in plan.facts and not [f for f in plan.findings if f.code in ("KV", "OOM")]


def test_doctor_json_gains_memory_and_its_table_a_line(shapes, env_for_tests):
    model = shapes("8b", LLAMA_31_8B)
    proc = run_common(["doctor", str(model), "--card", "nv-a100", "--json", "--", "--max-model-len", "131072", "-tp", "1"], env_for_tests)
    data = json.loads(proc.stdout)
    memory = data["memory"]
    assert "memory" not in data["facts"]
    assert memory["fits"] is True and memory["tensor_parallel_size"] == 1 and memory["devices"] == 1
    for key in ("weights_gib", "kv_gib", "per_device", "devices", "smallest_tp", "largest_max_model_len", "max_model_len"):
        assert key in memory, key
    proc = run_common(["doctor", str(model), "--card", "iluvatar-bi100", "--", "--max-model-len", "131072"], env_for_tests)
    assert proc.returncode == 1 and "memory: KV:" in proc.stdout and "python3 -m common explain KV" in proc.stdout


def test_the_many_model_table_gains_a_memory_column(shapes, env_for_tests, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    write_model(folder / "a-tiny", TINY)
    write_model(folder / "b-70b", LLAMA_31_70B)
    proc = run_common(["doctor", str(folder), "--card", "iluvatar-bi100"], env_for_tests)
    lines = proc.stdout.splitlines()
    assert "| model | card | verdict | codes | tokens | memory |" in lines
    tiny = next(line for line in lines if "a-tiny" in line)
    big = next(line for line in lines if "b-70b" in line)
    assert "fits on TP 1 of 8" in tiny and "fits on TP 8 of 8" in big, proc.stdout
    data = json.loads(run_common(["doctor", str(folder), "--card", "iluvatar-bi100", "--json"], env_for_tests).stdout)
    assert [row["memory"]["smallest_tp"] for row in data["rows"]] == [1, 8]


def test_summary_of_each_outcome():
    assert summary({"fits": None, "code": None, "reason": "no weight files (metadata only)"}).startswith("not judged")
    base = {"tensor_parallel_size": 1, "pipeline_parallel_size": 1, "devices_per_node": 8, "max_model_len": 8192, "weights_gib": 131.4}
    assert summary(dict(base, fits=False, code="OOM", smallest_tp=2, largest_max_model_len=None)) == "OOM: TP 2 holds 8192"
    assert summary(dict(base, fits=False, code="OOM", smallest_tp=None, largest_max_model_len=None)).startswith("OOM: no TP of a node of 8")
    assert Device.cpu(GIB).memory is None and Device.cpu(GIB).kv_space == GIB


def test_the_docs_table_of_what_fits_one_node_is_what_doctor_says(tmp_path):
    """docs/memory.md: the smallest tensor-parallel size of each card's node per popular shape
    (scripts/bench_memory.py --markdown prints it)."""
    from harness.fixtures.shapes import SHAPES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "memory.md").read_text()
    header = "| model | hygon-k100 | iluvatar-bi100 | nv-a100 | nv-a100@next |"
    lines = doc[doc.index(header) :].split("\n\n", 1)[0].splitlines()
    cards = header.strip("| ").split(" | ")[1:]
    rows = {line.strip("| ").split(" | ")[0]: line.strip("| ").split(" | ")[1:] for line in lines[2:] if line.startswith("| ")}
    assert sorted(rows) == sorted(SHAPES)
    for name, config in SHAPES.items():
        model = write_model(tmp_path / name, config)
        for card, expected in zip(cards, rows[name], strict=True):
            got = judged(model, card, [])
            said = (
                f"TP {got.judged.tp}" if got.fits else f"{got.judged.code}: {got.weights.total / GIB:.0f} GiB of weights, more than a node"
            )
            assert said == expected, (name, card)
