"""The manifest is validated with errors that name card and key; the committed engine profiles
are exactly what the manifest plus a snapshot of the real engine packages give."""

import copy
import os
import sys
from pathlib import Path

import pytest

from common.profile import load_profile
from compat_build import manifest, profiles

ROOT = Path(__file__).resolve().parents[1]
if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def raw():
    with open(manifest.MANIFEST, "rb") as fh:
        return tomllib.load(fh)


def test_manifest_loads_all_three_cards():
    m = manifest.load()
    assert sorted(m.cards) == ["hygon-k100", "iluvatar-bi100", "nv-a100"]
    assert m.cards["nv-a100"].vllm == "0.11.0"


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["cards"]["nv-a100"].update(colour="red"), "[cards.nv-a100]: unknown key 'colour'"),
    (lambda d: d["cards"]["hygon-k100"].pop("base_image"), "[cards.hygon-k100]: missing key 'base_image'"),
    (lambda d: d["cards"]["nv-a100"].update(head_sizes=[0]), "[cards.nv-a100]: key 'head_sizes'"),
    (lambda d: d["cards"]["nv-a100"].update(gpu_type=""), "[cards.nv-a100]: key 'gpu_type' must be a non-empty str"),
    (lambda d: d["release"].pop("framework"), "[release]: missing key 'framework'"),
    (lambda d: d["release"].update(image="{registry}/compat"), "[release]: key 'image' must contain {card}"),
    (lambda d: d["cards"]["nv-a100"].update(build_patches=["L9"]), "[cards.nv-a100]: key 'build_patches' names unknown"),
    (lambda d: d["cards"]["iluvatar-bi100"].pop("patched_ops_target"), "[cards.iluvatar-bi100]: L3 needs key 'patched_ops_target'"),
    (lambda d: d["cards"]["nv-a100"].update(vllm_source=3), "[cards.nv-a100]: key 'vllm_source' must be a str"),
])
def test_manifest_errors_name_card_and_key(mutate, message):
    data = copy.deepcopy(raw())
    mutate(data)
    with pytest.raises(manifest.ManifestError) as err:
        manifest.parse(data)
    assert message in str(err.value)


def test_card_folder_without_manifest_entry(tmp_path):
    for name in ("nv-a100", "hygon-k100", "iluvatar-bi100", "mystery-x1"):
        (tmp_path / name).mkdir()
    with pytest.raises(manifest.ManifestError, match="cards/mystery-x1: card folder without"):
        manifest.parse(raw(), str(tmp_path))


def test_every_card_folder_and_profile_exists():
    for name in manifest.load().cards:
        assert (ROOT / "cards" / name).is_dir()
        profile = load_profile(name)
        assert profile.card == name


@pytest.mark.skipif(not (ROOT / ".venv-engine" / "bin" / "python").exists() or
                    not (ROOT / ".venv-tf455" / "bin" / "python").exists(), reason="engine venvs not built")
def test_committed_profiles_match_manifest_and_real_engine(capsys):
    assert profiles.main(["--check"]) == 0, capsys.readouterr().out
    nv = load_profile("nv-a100")
    assert nv.transformers_version == "4.57.6" and "LlamaForCausalLM" in nv.architectures
    assert not nv.knows_tokenizer_class("TokenizersBackend") and nv.knows_tokenizer_class("Qwen2Tokenizer")
    assert load_profile("iluvatar-bi100").architectures is None  # its vLLM fork is only known in-image


def test_unknown_card_is_a_clear_error():
    with pytest.raises(ValueError, match="no engine profile for card 'nv-h100'"):
        load_profile("nv-h100")
    assert os.path.isdir(profiles.PROFILE_DIR)
