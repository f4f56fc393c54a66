"""R9: a CLIP/SigLIP vision tower saved by transformers 5 without its `vision_model.` level,
detected from the safetensors index or headers (metadata only, and only for the families
concerned), repaired by the image's vLLM plugin on engines that run general plugins; bad weight
files are findings, never a crash. The plugin's rename is checked on a fake weight iterator."""

import json
from functools import partial

import pytest

from common.vllm_plugin import compat_weight_names as names
from common.vllm_plugin import compat_plugin

from common.tests.helpers import metadata_layer_passed, model_dir, of_rule, only_rule, preflight_json, run_common
from .test_r8_rule import LFS, WITHOUT_PLUGINS, finding_without, plugin_repair, safetensors

TEXT = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 1,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "vocab_size": 32,
}
VISION = {"model_type": "clip_vision_model", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_hidden_layers": 2}
LLAVA = {
    "architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava",
    "text_config": TEXT,
    "vision_config": VISION,
    "image_token_index": 31,
    "torch_dtype": "bfloat16",
}
GEMMA3 = dict(
    LLAVA,
    model_type="gemma3",
    architectures=["Gemma3ForConditionalGeneration"],
    vision_config=dict(VISION, model_type="siglip_vision_model"),
)


only_r9 = only_rule("R2,R3,R3b,R4,R5,R6,H1,H2,R7,R8,MB", "only_r9")


def tower(flat: bool, prefix: str = "vision_tower.", siglip: bool = False):
    """A two-layer tower's tensor shapes under `prefix`, with or without the vision_model level."""
    level = "" if flat else "vision_model."
    p = prefix + level
    shapes = {f"{p}embeddings.patch_embedding.weight": [64, 3, 8, 8], f"{p}embeddings.position_embedding.weight": [17, 64]}
    if siglip:
        shapes[f"{p}embeddings.patch_embedding.bias"] = [64]
    else:
        shapes[f"{p}embeddings.class_embedding"] = [64]
        shapes[f"{p}pre_layrnorm.weight"] = [64]
    for i in range(2):
        shapes[f"{p}encoder.layers.{i}.self_attn.q_proj.weight"] = [64, 64]
    shapes[f"{p}post_layernorm.weight"] = [64]
    shapes["multi_modal_projector.linear_1.weight"] = [64, 64]
    shapes["language_model.model.embed_tokens.weight"] = [32, 64]
    shapes["language_model.lm_head.weight"] = [32, 64]
    return shapes


r9 = partial(of_rule, code="R9")  # (repairs, findings) of R9 in a plan


# ---- detection and the repair ------------------------------------------------------------------


def test_flat_clip_tower_in_one_file_gets_the_plugin(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": LLAVA, "model.safetensors": safetensors(tower(True))})
    plan = preflight_json(model, env=env_for_tests)
    repair = plugin_repair(plan, "R9")
    assert "7 vision tower tensors in the safetensors headers without the vision_model level" in repair["detail"]
    assert (
        "(e.g. vision_tower.embeddings.class_embedding, published as vision_tower.vision_model.embeddings.class_embedding)"
        in (repair["detail"])
    )
    assert plan["env"]["COMPAT_WEIGHT_NAMES"] == "vision_model"


def test_names_from_the_index_alone(tmp_path, env_for_tests):
    """With an index no header is read: the shards here are Git-LFS pointers (reading one would be
    a finding). The in-memory names of save_original_format=False (`model.vision_tower.`) count too."""
    shapes = tower(True, prefix="model.vision_tower.")
    files = {
        "config.json": LLAVA,
        "model.safetensors.index.json": {"metadata": {}, "weight_map": {n: "model-00001-of-00002.safetensors" for n in shapes}},
    }
    files["model-00001-of-00002.safetensors"] = LFS
    plan = preflight_json(model_dir(tmp_path / "m", files), env=env_for_tests)
    [repair], findings = r9(plan)
    assert findings == []
    assert "in model.safetensors.index.json" in repair["detail"] and "published as model.vision_tower.vision_model." in repair["detail"]


def test_flat_siglip_tower_of_gemma3(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": GEMMA3, "model.safetensors": safetensors(tower(True, siglip=True))})
    [repair], _ = r9(preflight_json(model, env=env_for_tests))
    assert "e.g. vision_tower.embeddings.patch_embedding.bias" in repair["detail"] and "gemma3" in repair["detail"]


@pytest.mark.parametrize(
    "config, weights",
    [
        (LLAVA, safetensors(tower(False))),  # the published layout
        # Not a family transformers 5 saves flat: nothing is read (the weights here are a pointer).
        (dict(LLAVA, model_type="qwen2_vl", architectures=["Qwen2VLForConditionalGeneration"]), LFS),
        (dict(TEXT, architectures=["LlamaForCausalLM"]), LFS),
        # A Pixtral tower in a llava config keeps its own names (vision_tower.transformer...).
        (dict(LLAVA, vision_config=dict(VISION, model_type="pixtral")), LFS),
    ],
    ids=["published", "qwen2-vl", "text-llama", "pixtral-tower"],
)
def test_nothing_where_the_names_are_the_engines(tmp_path, env_for_tests, config, weights):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config, "model.safetensors": weights}), env=env_for_tests)
    assert r9(plan) == ([], []) and plan["env"] == {}


def test_mixed_layouts_are_an_error(tmp_path, env_for_tests):
    shapes = dict(tower(False), **{"vision_tower.embeddings.class_embedding": [64]})
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": LLAVA, "model.safetensors": safetensors(shapes)}), env=env_for_tests)
    repairs, [finding] = r9(plan)
    assert repairs == [] and finding["severity"] == "error" and "mixed layouts" in finding["message"]


def test_vllm_plugins_filter_without_ours_is_an_error(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": LLAVA, "model.safetensors": safetensors(tower(True))})
    plan = preflight_json(model, env=dict(env_for_tests, VLLM_PLUGINS="lora_resolver"))
    repairs, [finding] = r9(plan)
    assert repairs == [] and finding["severity"] == "error"
    assert "VLLM_PLUGINS='lora_resolver' does not allow compat_weights, so it would fail to load them" in finding["message"]


@WITHOUT_PLUGINS
def test_engine_without_plugins(tmp_path, env_for_tests, monkeypatch, fact, value, severity):
    model = model_dir(tmp_path / "m", {"config.json": LLAVA, "model.safetensors": safetensors(tower(True))})
    finding_without(monkeypatch, fact, value, severity, model, env_for_tests, "R9")


def test_doctor_passes_r9_on_every_card(tmp_path, env_for_tests):
    model = model_dir(tmp_path / "m", {"config.json": LLAVA, "model.safetensors": safetensors(tower(True))})
    for card in ("nv-a100", "iluvatar-bi100"):
        data = json.loads(run_common(["doctor", str(model), "--card", card, "--json"], env_for_tests).stdout)
        assert metadata_layer_passed(data), (card, data["findings"])  # MB skipped here: unverified
        assert [r["code"] for r in data["repairs"]] == ["R9"]


# ---- bad inputs: a finding each, never a crash -----------------------------------------------------


@pytest.mark.parametrize(
    "content, reason",
    [
        (LFS, "Git-LFS pointer"),
        (safetensors(tower(True))[:60], "(truncated?)"),
        (b"\x01\x02", "too short for a safetensors header"),
        ("symlink-out", "leaves the model directory"),
    ],
    ids=["lfs", "truncated", "tiny", "symlink-out"],
)
def test_bad_weight_files_are_a_warning_with_the_reason(tmp_path, env_for_tests, content, reason):
    model = model_dir(tmp_path / "m", {"config.json": LLAVA})
    if content == "symlink-out":
        outside = tmp_path / "outside.safetensors"
        outside.write_bytes(safetensors(tower(True)))
        (model / "model.safetensors").symlink_to(outside)
    else:
        (model / "model.safetensors").write_bytes(content)
    repairs, [finding] = r9(preflight_json(model, env=env_for_tests))
    assert repairs == [] and finding["severity"] == "warning"
    assert finding["message"].startswith("cannot tell whether the vision tower's weights have their published names: model.safetensors")
    assert reason in finding["message"]


@pytest.mark.parametrize("index", ["{not json", json.dumps({"weight_map": ["a", "list"]})], ids=["malformed", "no-weight-map"])
def test_bad_index_is_a_warning_and_the_headers_still_count(tmp_path, env_for_tests, index):
    files = {"config.json": LLAVA, "model.safetensors.index.json": index, "model.safetensors": safetensors(tower(True))}
    plan = preflight_json(model_dir(tmp_path / "m", files), env=env_for_tests)
    [repair], [finding] = r9(plan)
    assert finding["severity"] == "warning" and "model.safetensors.index.json" in finding["message"]
    assert "in the safetensors headers" in repair["detail"]


# ---- the plugin's rename -------------------------------------------------------------------------


def test_rename_puts_the_level_back_for_the_towers_children_only():
    s = "vision_model"
    assert names.rename("vision_tower.embeddings.class_embedding", s) == "vision_tower.vision_model.embeddings.class_embedding"
    assert (
        names.rename("model.vision_tower.encoder.layers.0.mlp.fc1.weight", s)
        == "model.vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"
    )
    for kept in (
        "vision_tower.vision_model.embeddings.class_embedding",  # published: never twice
        "vision_tower.transformer.layers.0.attention.q_proj.weight",  # not a CLIP/SigLIP child
        "multi_modal_projector.linear_1.weight",
        "language_model.model.embeddings.weight",
        "model.layers.0.encoder.weight",
    ):
        assert names.rename(kept, s) == kept


def test_plugin_renames_on_a_fake_iterator():
    """No torch: the rename never touches the tensor, whatever object it is."""
    weights = [(name, object()) for name in tower(True)]
    out = list(compat_plugin.transform_weights(iter(weights), {"weight_names": "vision_model"}))
    assert [t for _, t in out] == [t for _, t in weights]  # same objects, same order
    assert [n for n, _ in out] == list(tower(False))


def test_plugin_renames_and_splits_in_one_pass():
    torch = pytest.importorskip("torch")
    weights = [
        ("vision_tower.embeddings.class_embedding", torch.zeros(4)),
        ("language_model.model.layers.0.mlp.experts.down_proj", torch.arange(2 * 3 * 5.0).reshape(2, 3, 5)),
    ]
    wanted = {"weight_names": "vision_model", "fused_experts": "qwen2_moe"}
    out = dict(compat_plugin.transform_weights(iter(weights), wanted))
    assert list(out) == [
        "vision_tower.vision_model.embeddings.class_embedding",
        "language_model.model.layers.0.mlp.experts.0.down_proj.weight",
        "language_model.model.layers.0.mlp.experts.1.down_proj.weight",
    ]
    assert torch.equal(out["language_model.model.layers.0.mlp.experts.1.down_proj.weight"], weights[1][1][1])


def test_register_wraps_with_what_the_environment_asks(monkeypatch):
    class Loader:
        def _get_weights_iterator(self, source):
            return iter([("vision_tower.embeddings.class_embedding", source)])

    monkeypatch.setattr(compat_plugin, "_find_loader", lambda: Loader)
    monkeypatch.delenv("COMPAT_FUSED_EXPERTS", raising=False)
    monkeypatch.setenv(names.ENV, "vision_model")
    compat_plugin.register()
    assert Loader._get_weights_iterator.compat_weights == {"weight_names": "vision_model"}
    assert list(Loader()._get_weights_iterator("t")) == [("vision_tower.vision_model.embeddings.class_embedding", "t")]
    # A second register with more asked rewraps the engine's own iterator, never the wrapper.
    monkeypatch.setenv("COMPAT_FUSED_EXPERTS", "mixtral")
    compat_plugin.register()
    assert Loader._get_weights_iterator.compat_weights == {"weight_names": "vision_model", "fused_experts": "mixtral"}
    assert not hasattr(Loader._get_weights_iterator.__wrapped__, "compat_weights")


def test_every_model_type_names_a_scheme_the_plugin_has():
    assert set(names.MODEL_TYPES.values()) <= set(names.SCHEMES)
