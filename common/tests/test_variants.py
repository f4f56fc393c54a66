"""A card with several engines: doctor reports every variant of the card and recommends the one
that starts the model with the fewest repairs; `card@variant` names one alone everywhere a card
name goes."""

import json
import os
import shutil
from pathlib import Path

import pytest

from common import doctor, profile

from .helpers import model_dir

# The newest engine's transformers is 5.x: the author venv's stands in for its Python here.
NEXT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-author" / "bin" / "python"
needs_transformers5 = pytest.mark.skipif(not NEXT_PYTHON.exists(), reason="needs .venv-author: run `make author-env`")

QWEN35 = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64}


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """The committed nv-a100 profile, and an `nv-a100@next` one of a transformers-5 engine that
    serves Qwen3.5 (its facts as the newest engine's snapshot gives them)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    shutil.copy(os.path.join(profile.PROFILE_DIR, "nv-a100.json"), folder / "nv-a100.json")
    data = json.loads((folder / "nv-a100.json").read_text())
    data["card"], data["vllm_version"], data["transformers_version"] = "nv-a100@next", "0.32.0", "5.19.0"
    engine = data["engine"]
    engine["architectures"].append("Qwen3_5ForCausalLM")
    engine["config_model_types"].append("qwen3_5")
    engine["tokenizer_classes"].append("TokenizersBackend")
    engine["reads"] = {"rope_parameters": True, "dtype": True, "extra_special_tokens_list": True}
    (folder / "nv-a100@next.json").write_text(json.dumps(data))
    monkeypatch.setattr(profile, "PROFILE_DIR", str(folder))
    return folder


def test_variants_of_a_card(profiles):
    assert profile.variants_of("nv-a100") == ["nv-a100", "nv-a100@next"]
    assert profile.variants_of("nv-a100@next") == ["nv-a100@next"]
    assert profile.load_profile("nv-a100@next").transformers_version == "5.19.0"


@needs_transformers5
def test_doctor_reports_every_variant_and_recommends_the_one_that_starts(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": QWEN35})
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"), COMPAT_ENGINE_PYTHON_NEXT=str(NEXT_PYTHON))
    assert doctor.run(str(model), "nv-a100", [], env, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"] == "nv-a100@next" and data["card"] == "nv-a100@next"
    assert data["variants"]["nv-a100"]["verdict"] == "fails" and "CONFIG" in data["variants"]["nv-a100"]["failing"]
    assert data["variants"]["nv-a100@next"]["verdict"] == "starts"
    assert doctor.run(str(model), "nv-a100", [], env, as_json=False) == 0
    text = capsys.readouterr().out
    assert "| nv-a100 | 0.11.0 | fails |" in text and "| nv-a100@next (recommended) | 0.32.0 | starts |" in text
    assert "recommended: nv-a100@next (the nv-a100 engine: fails)" in text


@needs_transformers5
def test_a_transformers5_model_needs_no_repair_on_a_transformers5_engine(profiles, models, env_for_tests, capsys, tmp_path):
    """The profile decides, not a version number: R3, R3b and R5 find nothing to repair there."""
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"), COMPAT_ENGINE_PYTHON_NEXT=str(NEXT_PYTHON))
    assert doctor.run(str(models("v5-generic")), "nv-a100", [], env, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"] == "nv-a100@next" and data["repairs"] == [] and data["args"] == []
    assert data["variants"]["nv-a100"]["verdict"] == "starts" and data["variants"]["nv-a100"]["args"]


@needs_transformers5
def test_a_named_variant_is_judged_alone(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": QWEN35})
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"), COMPAT_ENGINE_PYTHON=str(NEXT_PYTHON))
    assert doctor.run(str(model), "nv-a100@next", [], env, as_json=True) == 0
    assert "variants" not in json.loads(capsys.readouterr().out)


def test_a_variant_without_its_engines_python_is_unverified_not_judged_by_another(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": QWEN35})
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"))
    assert doctor.run(str(model), "nv-a100", [], env, as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["variants"]["nv-a100@next"]["verdict"] == "unverified" and data["recommended"] is None
