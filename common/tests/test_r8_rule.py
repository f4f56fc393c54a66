"""R8: MoE experts stored fused, detected from the safetensors index and headers (metadata only),
repaired by the image's vLLM plugin on engines that run general plugins; bad weight files are
findings, never a crash. The plugin's own split is checked against transformers 5's layout."""

import json
import os
import struct
from functools import partial
from pathlib import Path
from typing import Any, Dict

import pytest

from common.model.modeldir import ModelDir
from common.rules.support.plugin import PLUGIN_DIR
from common.model.safetensors_header import HEADER_CAP, read_header
from common.vllm_plugin import compat_fused_experts as plugin
from common.vllm_plugin import compat_plugin

from common.tests.helpers import ROOT, metadata_layer_passed, model_dir, of_rule, only_rule, preflight_json, run_common

MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 8,
    "intermediate_size": 16,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 4,
    "num_hidden_layers": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "torch_dtype": "bfloat16",
}
LFS = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"0" * 64 + b"\nsize 123456\n"


only_r8 = only_rule("R2,R3,R3b,R4,R5,H1,H2,R7,R11,MB", "only_r8")


def safetensors(shapes, pad: int = 0) -> bytes:
    """A safetensors file of bf16 tensors with those shapes: the header, then zero bytes."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * (offset + pad)


def layer_shapes(fused: bool, layers: int = 2, experts: int = 4, hidden: int = 8, inter: int = 16):
    shapes = {"model.embed_tokens.weight": [32, hidden], "lm_head.weight": [32, hidden]}
    for i in range(layers):
        p = f"model.layers.{i}"
        shapes[f"{p}.self_attn.q_proj.weight"] = [hidden, hidden]
        if fused:
            shapes[f"{p}.mlp.gate.weight"] = [experts, hidden]
            shapes[f"{p}.mlp.experts.gate_up_proj"] = [experts, 2 * inter, hidden]
            shapes[f"{p}.mlp.experts.down_proj"] = [experts, hidden, inter]
        else:
            shapes[f"{p}.block_sparse_moe.gate.weight"] = [experts, hidden]
            for e in range(experts):
                for w, shape in (("w1", [inter, hidden]), ("w3", [inter, hidden]), ("w2", [hidden, inter])):
                    shapes[f"{p}.block_sparse_moe.experts.{e}.{w}.weight"] = shape
    return shapes


r8 = partial(of_rule, code="R8")  # (repairs, findings) of R8 in a plan


def plugin_repair(plan: dict, code: str) -> dict:
    """The one repair of `code` (R8, R9) in a plan, verified and with no finding of its own, which
    travels in the environment alone: the compat plugin's directory first on PYTHONPATH."""
    [repair], findings = of_rule(plan, code)
    assert findings == [] and repair["verified"] is True
    assert plan["env"]["PYTHONPATH"].split(os.pathsep)[0] == PLUGIN_DIR
    assert plan["args"] == []  # the repair travels in the environment only
    # The directory really holds what vLLM's entry-point discovery reads.
    [entry] = (ROOT / "common" / "vllm_plugin").glob("*.dist-info/entry_points.txt")
    assert "[vllm.general_plugins]\ncompat_weights = compat_plugin:register" in entry.read_text()
    return repair


# An engine without what the weight rules (R8, R9) need of it: (profile fact, its value, the
# severity doctor must give the rule's finding); a fact the profile could not read is None.
WITHOUT_PLUGINS = pytest.mark.parametrize(
    "fact, value, severity",
    [("general_plugins", False, "error"), ("weights_iterator_hook", False, "error"), ("general_plugins", None, "unverified")],
)


def examine_without(monkeypatch: Any, fact: str, value: Any, model: Path, env: Dict[str, str], card: str = "iluvatar-bi100") -> dict:
    """doctor's in-process judgement of `model` on `card` with one fact of the card's profile set
    to `value`."""
    from common.doctor import doctor
    from common.engine.profile import load_profile
    from common.start import preflight

    def profile_without(card: str) -> Any:
        profile = load_profile(card)
        setattr(profile, fact, value)
        return profile

    monkeypatch.setattr(preflight, "load_profile", profile_without)
    return doctor.examine(str(model), card, [], env)


def finding_without(monkeypatch: Any, fact: str, value: Any, severity: str, model: Path, env: Dict[str, str], code: str) -> dict:
    """The one finding of `code` doctor gives `model` on an engine without `fact`: of `severity`,
    with no repair, and the verdict that severity makes."""
    data = examine_without(monkeypatch, fact, value, model, env)
    [finding] = [f for f in data["findings"] if f["code"] == code]
    assert finding["severity"] == severity and data["repairs"] == []
    assert data["verdict"] == ("fails" if severity == "error" else "unverified")
    return finding


# ---- detection and the repair ------------------------------------------------------------------


def test_single_file_fused_mixtral_gets_the_plugin(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL, "model.safetensors": safetensors(layer_shapes(True))})
    plan = preflight_json(model, env=env_for_tests)
    repair = plugin_repair(plan, "R8")
    assert "4 fused expert tensors in the safetensors headers" in repair["detail"]
    assert plan["env"]["COMPAT_FUSED_EXPERTS"] == "mixtral"


def test_sharded_checkpoint_names_from_the_index_and_one_header(tmp_path, env_for_tests):
    """The index gives the names; only the shard holding the first fused tensor has its header
    read (the others are Git-LFS pointers here: reading them would be a finding)."""
    shapes = layer_shapes(True, experts=8)
    first = "model.layers.0.mlp.experts.down_proj"
    files = {"config.json": dict(MIXTRAL, num_local_experts=8)}
    weight_map = {name: ("model-00001-of-00002.safetensors" if name == first else "model-00002-of-00002.safetensors") for name in shapes}
    files["model.safetensors.index.json"] = {"metadata": {}, "weight_map": weight_map}
    files["model-00001-of-00002.safetensors"] = safetensors({first: shapes[first]})
    files["model-00002-of-00002.safetensors"] = LFS
    plan = preflight_json(model_dir(tmp_path / "m", files), env=env_for_tests)
    [repair], findings = r8(plan)
    assert findings == []
    assert "4 fused expert tensors in model.safetensors.index.json (e.g. model.layers.0.mlp.experts.down_proj)" in repair["detail"]


def test_qwen3_moe_gets_the_qwen2_moe_layout(tmp_path, env_for_tests):
    config = dict(MIXTRAL, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=4)
    del config["num_local_experts"]
    plan = preflight_json(
        model_dir(tmp_path / "m", {"config.json": config, "model.safetensors": safetensors(layer_shapes(True))}), env=env_for_tests
    )
    [repair], _ = r8(plan)
    assert repair["env"]["COMPAT_FUSED_EXPERTS"] == "qwen2_moe"


@pytest.mark.parametrize(
    "config, weights",
    [
        (MIXTRAL, safetensors(layer_shapes(False))),  # per expert, as transformers 4 saved it
        # Not a model type transformers 5 converts: nothing is read (the weights here are a pointer).
        (dict(MIXTRAL, model_type="llama", architectures=["LlamaForCausalLM"]), LFS),
        # gpt-oss stores its experts fused in its own original format: the engine reads it as is.
        (dict(MIXTRAL, model_type="gpt_oss", architectures=["GptOssForCausalLM"]), safetensors(layer_shapes(True))),
    ],
    ids=["per-expert", "dense-llama", "gpt-oss-native"],
)
def test_nothing_where_the_experts_are_in_the_engines_format(tmp_path, env_for_tests, config, weights):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config, "model.safetensors": weights}), env=env_for_tests)
    assert r8(plan) == ([], []) and plan["env"] == {}


@pytest.mark.parametrize(
    "shapes, message",
    [
        (
            {"model.layers.0.mlp.experts.gate_up_proj": [32, 8]},
            "not in transformers 5's shape (model.layers.0.mlp.experts.gate_up_proj [32, 8]",
        ),
        ({"model.layers.0.mlp.experts.gate_up_proj": [3, 32, 8]}, "[3, 32, 8]; 4 experts"),
        ({"model.layers.0.mlp.experts.gate_up_proj": [4, 31, 8]}, "not in transformers 5's shape"),
        (
            {"model.layers.0.mlp.experts.gate_up_proj": [4, 32, 8], "model.layers.0.mlp.experts.gate_up_proj_bias": [4, 32]},
            "stacked expert tensors the plugin cannot split: model.layers.0.mlp.experts.gate_up_proj_bias",
        ),
    ],
    ids=["2-d", "expert-count", "odd-gate-up", "fused-bias"],
)
def test_fused_tensors_the_plugin_cannot_split_are_an_error(tmp_path, env_for_tests, shapes, message):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": MIXTRAL, "model.safetensors": safetensors(shapes)}), env=env_for_tests)
    repairs, [finding] = r8(plan)
    assert repairs == [] and finding["severity"] == "error" and message in finding["message"]


def test_vllm_plugins_filter_without_ours_is_an_error_and_is_not_overridden(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL, "model.safetensors": safetensors(layer_shapes(True))})
    plan = preflight_json(model, env=dict(env_for_tests, VLLM_PLUGINS="lora_resolver"))
    repairs, [finding] = r8(plan)
    assert (
        repairs == []
        and finding["severity"] == "error"
        and "VLLM_PLUGINS='lora_resolver' does not allow compat_weights" in finding["message"]
    )
    plan = preflight_json(model, env=dict(env_for_tests, VLLM_PLUGINS="lora_resolver, compat_weights"))
    assert [r["code"] for r in plan["repairs"]] == ["R8"]


def test_doctor_passes_r8_on_every_card_whose_engine_runs_plugins(tmp_path, env_for_tests):
    """Every committed profile was snapshotted from an engine with general plugins (0.5.5 has them too)."""
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL, "model.safetensors": safetensors(layer_shapes(True))})
    for card in ("nv-a100", "iluvatar-bi100"):
        proc = run_common(["doctor", str(model), "--card", f"{card}", "--json"], env_for_tests)
        data = json.loads(proc.stdout)
        assert metadata_layer_passed(data), (card, data["findings"])  # MB skipped here: unverified
        assert [r["code"] for r in data["repairs"]] == ["R8"]


@WITHOUT_PLUGINS
def test_engine_without_plugins_fails_in_doctor(tmp_path, env_for_tests, monkeypatch, fact, value, severity):
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL, "model.safetensors": safetensors(layer_shapes(True))})
    finding = finding_without(monkeypatch, fact, value, severity, model, env_for_tests, "R8")
    if severity == "error":
        assert "would fail to load them or load wrong expert weights" in finding["message"]


# ---- bad weight files: a finding each, never a crash ---------------------------------------------


def bad_files(tmp_path):
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(safetensors(layer_shapes(True)))
    good = safetensors(layer_shapes(True))
    header = json.dumps({"x": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()
    return {
        "lfs": (LFS, "Git-LFS pointer"),
        "tiny": (b"\x01\x02", "too short for a safetensors header"),
        "truncated": (good[:100], "(truncated?)"),
        "over-cap": (struct.pack("<Q", HEADER_CAP + 1) + b"{}", "over the"),
        "not-json": (struct.pack("<Q", 5) + b"{nope", "not valid JSON"),
        "not-utf8": (struct.pack("<Q", 4) + b'"\xff"x', "not valid JSON"),
        "list": (struct.pack("<Q", 2) + b"[]", "not a JSON object of tensors"),
        "bad-shape": (struct.pack("<Q", len(header)) + header.replace(b"[1]", b'"1"'), "has no valid shape"),
        "symlink-out": (outside, "leaves the model directory"),
    }


@pytest.mark.parametrize("case", ["lfs", "tiny", "truncated", "over-cap", "not-json", "not-utf8", "list", "bad-shape", "symlink-out"])
def test_bad_weight_files_are_a_warning_with_the_reason(tmp_path, env_for_tests, case):
    content, reason = bad_files(tmp_path)[case]
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL})
    if isinstance(content, bytes):
        (model / "model.safetensors").write_bytes(content)
    else:
        (model / "model.safetensors").symlink_to(content)
    header, problem = read_header(ModelDir(str(model)), "model.safetensors")
    assert header is None and reason in problem.reason
    plan = preflight_json(model, env=env_for_tests)
    repairs, [finding] = r8(plan)
    assert repairs == [] and finding["severity"] == "warning"
    assert (
        finding["message"].startswith("cannot tell whether the experts are stored fused: model.safetensors")
        and reason in finding["message"]
    )


def test_bad_index_is_a_warning(tmp_path, env_for_tests):
    files = {"config.json": MIXTRAL, "model.safetensors.index.json": {"weight_map": ["not", "a", "map"]}}
    plan = preflight_json(model_dir(tmp_path / "m", files), env=env_for_tests)
    _, [finding] = r8(plan)
    assert finding["severity"] == "warning" and "has no weight_map" in finding["message"]


def test_header_read_is_exactly_its_bytes(tmp_path):
    """8 bytes of length plus the JSON: a weight byte is never read (unbuffered reads)."""
    data = safetensors(layer_shapes(True), pad=1 << 20)
    model = model_dir(tmp_path / "m", {"model.safetensors": data})
    modeldir = ModelDir(str(model))
    modeldir.state("model.safetensors")  # what the state check costs is not the header's
    baseline = -(_rchar() - _rchar())  # reading /proc/thread-self/io counts too
    before = _rchar()
    header, problem = read_header(modeldir, "model.safetensors")
    read = _rchar() - before - baseline
    assert problem is None and header.shapes["model.layers.1.mlp.experts.down_proj"] == [4, 8, 16]
    length = struct.unpack("<Q", data[:8])[0]
    assert header.bytes_read == 8 + length and read == 8 + length


def _rchar() -> int:
    # This thread's reads alone: the process's count (/proc/self/io) also has those of pytest-xdist's
    # thread that reads the worker's commands.
    with open("/proc/thread-self/io") as fh:
        return int(next(line for line in fh if line.startswith("rchar")).split()[1])


# ---- the plugin's split: transformers 5's layout, inverted ----------------------------------------


def test_every_model_type_names_a_layout_the_plugin_has():
    assert set(plugin.MODEL_TYPES.values()) <= set(plugin.LAYOUTS)


def test_plugin_module_imports_without_torch():
    import subprocess
    import sys

    code = "import sys; sys.modules['torch'] = None; import compat_plugin as p; p.register(); print('ok')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=PLUGIN_DIR, capture_output=True, text=True, env={"PATH": os.environ["PATH"]})
    assert proc.stdout.strip() == "ok", proc.stderr


def test_split_inverts_transformers5_mixtral_layout():
    torch = pytest.importorskip("torch")
    experts, inter, hidden = 3, 4, 5
    w1, w3 = torch.randn(experts, inter, hidden), torch.randn(experts, inter, hidden)
    w2 = torch.randn(experts, hidden, inter)
    # transformers 5's conversion: MergeModulelist(dim=0) then Concatenate(dim=1) (gate before up).
    gate_up = torch.cat([w1, w3], dim=1)
    weights = [
        ("model.layers.0.mlp.gate.weight", torch.ones(experts, hidden)),
        ("model.layers.0.mlp.experts.gate_up_proj", gate_up),
        ("model.layers.0.mlp.experts.down_proj", w2),
    ]
    out = dict(compat_plugin.transform_weights(iter(weights), {"fused_experts": "mixtral"}))
    assert list(out)[:3] == [
        "model.layers.0.block_sparse_moe.gate.weight",
        "model.layers.0.block_sparse_moe.experts.0.w1.weight",
        "model.layers.0.block_sparse_moe.experts.0.w3.weight",
    ]
    for e in range(experts):
        assert torch.equal(out[f"model.layers.0.block_sparse_moe.experts.{e}.w1.weight"], w1[e])
        assert torch.equal(out[f"model.layers.0.block_sparse_moe.experts.{e}.w3.weight"], w3[e])
        assert torch.equal(out[f"model.layers.0.block_sparse_moe.experts.{e}.w2.weight"], w2[e])
    assert len(out) == 1 + 3 * experts


def test_split_refuses_a_tensor_of_another_shape():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match="not the \\[experts, 2\\*intermediate, hidden\\]"):
        list(
            compat_plugin.transform_weights(
                iter([("layers.0.mlp.experts.gate_up_proj", torch.zeros(4, 8))]), {"fused_experts": "qwen2_moe"}
            )
        )


def test_register_does_nothing_unless_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(compat_plugin, "_find_loader", lambda: calls.append(1))
    monkeypatch.delenv(plugin.ENV, raising=False)
    monkeypatch.delenv("COMPAT_WEIGHT_NAMES", raising=False)
    compat_plugin.register()
    monkeypatch.setenv(plugin.ENV, "no-such-layout")
    compat_plugin.register()
    assert calls == []


def test_register_wraps_once_and_survives_a_missing_loader(monkeypatch):
    class Loader:
        def _get_weights_iterator(self, source):
            return iter([("a.mlp.experts.down_proj", source)])

    monkeypatch.setenv(plugin.ENV, "mixtral")
    monkeypatch.delenv("COMPAT_WEIGHT_NAMES", raising=False)
    monkeypatch.setattr(compat_plugin, "_find_loader", lambda: Loader)
    compat_plugin.register()
    compat_plugin.register()  # vLLM loads plugins again in each process; in one process it is a no-op
    assert Loader._get_weights_iterator.compat_weights == {"fused_experts": "mixtral"}
    assert Loader._get_weights_iterator.__wrapped__.__name__ == "_get_weights_iterator"
    assert not hasattr(Loader._get_weights_iterator.__wrapped__, "compat_weights")
    monkeypatch.setattr(compat_plugin, "_find_loader", lambda: None)
    compat_plugin.register()  # logs, never raises
