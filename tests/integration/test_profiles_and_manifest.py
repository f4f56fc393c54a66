"""The manifest is validated with errors that name card and key; the committed engine profiles
are exactly what the manifest plus a snapshot of the real engine packages give."""

import copy
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from common.engine.profile import load_profile
from compat_build import manifest, model_fields, profiles

ROOT = Path(__file__).resolve().parents[2]


def raw():
    with open(manifest.MANIFEST, "rb") as fh:
        return tomllib.load(fh)


def card_toml(name):
    with open(ROOT / "cards" / name / "card.toml", "rb") as fh:
        return tomllib.load(fh)


def test_manifest_loads_all_three_cards_from_their_folders():
    m = manifest.load()
    assert sorted(m.cards) == ["hygon-k100", "iluvatar-bi100", "nv-a100", "nv-a100@next"]
    bi100 = m.cards["iluvatar-bi100"]
    assert bi100.vllm == "0.5.5" and bi100.base_image.endswith("py3.10-poc-llm-infer:v1.2.3")
    assert bi100.build_patches == ("L1", "L3") and bi100.ops_target == "ixformer.functions"
    assert bi100.folder == str(ROOT / "cards" / "iluvatar-bi100")


@pytest.mark.parametrize(
    "card, mutate, message",
    [
        ("nv-a100", lambda d: d["engine"].update(colour="red"), "cards/nv-a100/card.toml [engine]: unknown key 'colour'"),
        ("hygon-k100", lambda d: d["image"].pop("base"), "cards/hygon-k100/card.toml [image]: missing key 'base'"),
        ("nv-a100", lambda d: d.update(extra={}), "cards/nv-a100/card.toml: unknown section [extra]"),
        ("nv-a100", lambda d: d["attention"].update(head_sizes=[0]), "[attention]: key 'head_sizes' must list positive"),
        ("nv-a100", lambda d: d["attention"].update(head_sizes=[True]), "[attention]: key 'head_sizes' must list positive"),
        ("nv-a100", lambda d: d["platform"].update(gpu_type=""), "[platform]: key 'gpu_type' must be a non-empty str"),
        ("nv-a100", lambda d: d["build"].update(patches=["L9"]), "[build]: key 'patches' names ['L9'], which are no build codes"),
        ("nv-a100", lambda d: d["build"].update(patches=["OOM"]), "[build]: key 'patches' names ['OOM']"),
        ("iluvatar-bi100", lambda d: d["build"].pop("ops_target"), "[build]: L3 needs keys 'ops_dir'"),
        ("iluvatar-bi100", lambda d: d["build"].update(ops_dir="nowhere"), "[build]: ops_dir 'nowhere' holds no .py ops"),
        ("nv-a100", lambda d: d["engine"].update(vllm_source=3), "[engine]: key 'vllm_source' must be a non-empty str"),
        ("nv-a100", lambda d: d["attention"].update(head_size_policy="hope"), "key 'head_size_policy' must be one of"),
        ("nv-a100", lambda d: d["device"].pop("memory_gib"), "cards/nv-a100/card.toml [device]: missing key 'memory_gib'"),
        ("iluvatar-bi100", lambda d: d["device"].update(memory_gib="32GB"), "[device]: key 'memory_gib' must be a non-empty number"),
        ("hygon-k100", lambda d: d["device"].update(per_node=0), "[device]: key 'per_node' must be a positive int"),
        ("hygon-k100", lambda d: d["device"].update(per_node=True), "[device]: key 'per_node' must be a positive int"),
        ("nv-a100", lambda d: d["device"].update(memory_gib=-80), "[device]: key 'memory_gib' must be a positive number"),
    ],
)
def test_card_errors_name_file_section_and_key(card, mutate, message):
    data = copy.deepcopy(card_toml(card))
    mutate(data)
    with pytest.raises(manifest.ManifestError) as err:
        manifest.parse_card(card, data, str(ROOT / "cards" / card))
    assert message in str(err.value)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d["release"].pop("framework"), "[release]: missing key 'framework'"),
        (lambda d: d["release"].update(image="{registry}/compat"), "[release]: key 'image' must contain {card}"),
        (lambda d: d["matrix"]["cards"].append("nv-a100"), "[matrix]: key 'cards' must list distinct card names"),
        (lambda d: d["matrix"]["cards"].append("mystery-x1"), "card 'mystery-x1' has no folder cards/mystery-x1/"),
        (lambda d: d.update(cards={}), "build_matrix.toml: unknown table 'cards'"),
    ],
)
def test_matrix_errors_name_table_and_key(mutate, message):
    data = copy.deepcopy(raw())
    mutate(data)
    with pytest.raises(manifest.ManifestError) as err:
        manifest.parse(data)
    assert message in str(err.value)


def test_a_card_is_one_folder_and_one_matrix_line(tmp_path):
    """docs/images-and-releases.md's worked example: copy a card folder, name it in the matrix, and it is a card."""
    cards = tmp_path / "cards"
    shutil.copytree(ROOT / "cards", cards)
    shutil.copytree(cards / "nv-a100", cards / "nv-h100")
    (cards / "nv-h100" / "card.toml").write_text(
        (cards / "nv-a100" / "card.toml").read_text().replace('gpu_type = "nvidia_a100"', 'gpu_type = "nvidia_h100"')
    )
    data = raw()
    with pytest.raises(manifest.ManifestError, match="cards/nv-h100: card folder not listed"):
        manifest.parse(data, str(cards))
    data["matrix"]["cards"].append("nv-h100")
    m = manifest.parse(data, str(cards))
    assert m.cards["nv-h100"].gpu_type == "nvidia_h100"
    assert manifest.image_ref(m, "nv-h100", "v1") == "harbor.4pd.io/enginex-compat/vllm-compat-nv-h100:v1"


def test_a_card_file_that_is_not_toml_is_named(tmp_path):
    cards = tmp_path / "cards"
    shutil.copytree(ROOT / "cards", cards)
    (cards / "hygon-k100" / "card.toml").write_text("[image\nbase = 1\n")
    with pytest.raises(manifest.ManifestError, match="cards/hygon-k100/card.toml: not valid TOML"):
        manifest.parse(raw(), str(cards))


def test_every_card_has_its_files_and_a_profile_of_its_engine():
    from compat_build import task_info

    for name, card in manifest.load().cards.items():
        assert open(task_info.path_for(name), encoding="utf-8").read().count("GPU_TYPE=") == 1
        profile = load_profile(name)
        assert (profile.card, profile.vllm_version, profile.transformers_version) == (name, card.vllm, card.transformers)
        assert profile.head_size_policy == card.head_size_policy


@pytest.mark.skipif(
    not all((ROOT / v / "bin" / "python").exists() for v in (".venv-engine", ".venv-engine055", ".venv-engine-next")),
    reason="engine venvs not built: run `make engine-env engine055-env engine-next-env`",
)
def test_committed_profiles_match_manifest_and_real_engine(capsys):
    assert profiles.main(["--check"]) == 0, capsys.readouterr().out
    nv = load_profile("nv-a100")
    assert nv.transformers_version == "4.57.6" and "LlamaForCausalLM" in nv.architectures
    assert not nv.knows_tokenizer_class("TokenizersBackend") and nv.knows_tokenizer_class("Qwen2Tokenizer")
    bi100 = load_profile("iluvatar-bi100")  # upstream vLLM 0.5.5, the fork's generation
    assert "LlamaForCausalLM" in bi100.architectures and "Qwen3ForCausalLM" not in bi100.architectures
    assert bi100.accepts("rope_theta") and not bi100.accepts("hf_overrides") and not bi100.accepts("hf_config_path")
    assert bi100.transformers_backend is False and bi100.head_dim_none_fallback is False
    assert "mixtral" in bi100.null_head_dim_model_types  # transformers 4.55 MixtralConfig: head_dim None
    assert nv.transformers_backend is True and nv.head_dim_none_fallback is True
    assert "T5ForConditionalGeneration" not in nv.backend_architectures and "mxfp4" not in bi100.quantization_methods
    nxt = load_profile("nv-a100@next")  # the newest engine: transformers 5 reads its own formats
    assert nxt.transformers_version.startswith("5.") and "Gemma4ForCausalLM" in nxt.architectures
    assert nxt.reads_rope_parameters and nxt.reads_dtype_key and nxt.reads_extra_special_tokens_list
    assert nxt.knows_tokenizer_class("TokenizersBackend") and nxt.head_dim_none_fallback is True
    assert bi100.serve_config_file is False and nv.serve_config_file is True and nxt.serve_config_file is True


def test_each_card_states_its_device_and_node_and_the_profiles_carry_them():
    """BI-100 32 GiB, K100-AI 64 GiB, the platform's A100 80 GiB, eight to a node; a variant
    runs on its card's device; the profile holds them beside its engine's memory facts."""
    m = manifest.load()
    memory = {name: dict(card.device)["memory_gib"] for name, card in m.cards.items()}
    assert memory == {"iluvatar-bi100": 32, "hygon-k100": 64, "nv-a100": 80, "nv-a100@next": 80}
    for name, card in m.cards.items():
        device = dict(card.device)
        assert device["per_node"] == 8 and device["non_torch_gib"] > 0 and device["cuda_graph_gib"] > 0
        assert profiles.card_json(card)["device"] == device
        assert load_profile(name).device == device
    bi100, nv = load_profile("iluvatar-bi100").memory, load_profile("nv-a100").memory
    # Read from each engine's source: 0.5.5 refuses in whole blocks of every layer and pads
    # DeepSeek-V2's heads; 0.11 sums each layer's pages, keeps windows and MLA's latent.
    assert (bi100["kv_check"], bi100["block_size"], bi100["gpu_memory_utilization"]) == ("blocks", 16, 0.9)
    assert bi100["padded_head_sizes"] == {"deepseek_v2": 256} and not bi100["window_layers"] and not bi100["mla_latent"]
    assert (bi100["long_context_chunked_prefill"], bi100["chunked_prefill_tokens"], bi100["min_batched_tokens"]) == (32768, 512, 2048)
    assert (nv["kv_check"], nv["block_size"], nv["gpu_memory_utilization"], nv["max_num_batched_tokens"]) == ("pages", 16, 0.9, 2048)
    assert nv["window_layers"] and nv["mla_latent"] and nv["linear_state"] and "deepseek_v3" in nv["mla_model_types"]
    assert nv["kv_cache_memory_flag"] and not bi100["kv_cache_memory_flag"]


def test_unknown_card_is_a_clear_error():
    with pytest.raises(ValueError, match="no engine profile for card 'nv-h100'"):
        load_profile("nv-h100")
    with pytest.raises(ValueError, match=r"known: hygon-k100, iluvatar-bi100, nv-a100"):
        load_profile("nv-h100")


def test_a_card_variant_is_the_card_with_its_own_engine(tmp_path):
    """nv-a100's [variants.next]: its own base image, engine, build patches and framework;
    everything else (attention, GPU type) as the card's default engine."""
    from compat_build import task_info

    cards = tmp_path / "cards"
    shutil.copytree(ROOT / "cards", cards)
    card = cards / "nv-a100" / "card.toml"
    assert "[variants.next]" in card.read_text()
    m = manifest.parse(raw(), str(cards))
    nxt, default = m.cards["nv-a100@next"], m.cards["nv-a100"]
    assert (nxt.card, nxt.variant, nxt.vllm, nxt.build_patches) == ("nv-a100", "next", "0.32.0", ())
    assert (nxt.gpu_type, nxt.head_size_policy, nxt.folder) == (default.gpu_type, default.head_size_policy, default.folder)
    assert manifest.framework(m, "nv-a100@next") == "vllm_compat_next" and manifest.framework(m, "nv-a100") == "vllm_compat"
    assert manifest.image_ref(m, "nv-a100@next", "v2") == "harbor.4pd.io/enginex-compat/vllm-compat-nv-a100-next:v2"
    assert task_info.path_for("nv-a100@next", str(cards)).endswith("cards/nv-a100/task_info@next.env")
    assert "FRAMEWORK=vllm_compat_next" in task_info.task_info(m, "nv-a100@next")
    card.write_text(card.read_text() + "[variants.bad]\ncolour = { x = 1 }\n")
    with pytest.raises(manifest.ManifestError, match=r"\[variants.bad\]: unknown section \[colour\]"):
        manifest.parse(raw(), str(cards))


@pytest.mark.skipif(
    not all((ROOT / v / "bin" / "python").exists() for v in (".venv-engine", ".venv-engine055", ".venv-engine-next", ".venv-author")),
    reason="engine and author venvs not built: run `make envs`",
)
def test_the_committed_field_table_is_what_the_model_code_reads(capsys):
    """common/engine/model_fields.json (what each architecture's model code reads, per engine: the
    fields doctor's `proven` must see covered) is the one the engines' and authors' sources give."""
    assert model_fields.main(["--check"]) == 0, capsys.readouterr().out
    table = json.loads((ROOT / "common" / "engine" / "model_fields.json").read_text())["engines"]
    assert "hidden_act" in table["0.5.5"]["LlamaForCausalLM"] and "rope_scaling" in table["0.11.0"]["LlamaForCausalLM"]
