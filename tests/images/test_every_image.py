"""What every image of the matrix promises, checked on the image itself in a real daemon: its
labels, its own gate (`selftest`), the profile it baked from its own engine, its build steps, and
the user's pre-submit check (`doctor` inside the image)."""

from __future__ import annotations

import json
import subprocess

import pytest

from compat_build import manifest, release
from tests.images.conftest import CARDS, IMAGE_HOME, ROOT, in_image

# Where a baked profile may differ from the committed one (made by `make profiles` from the
# unpatched engine venvs), and why: L1 patches the image's transformers to read the list form.
BAKED_DIFFERENCES = {
    "hygon-k100": {("engine", "reads", "extra_special_tokens_list"): (False, True)},
    "iluvatar-bi100": {("engine", "reads", "extra_special_tokens_list"): (False, True)},
}


# The bundled model that is clean for each image's engine (saved by the transformers whose
# config keys it reads): BI-100's transformers 4.55 reads `torch_dtype` only.
CLEAN_MODEL = {"hygon-k100": "457-generic", "iluvatar-bi100": "455-generic", "nv-a100": "457-generic", "nv-a100@next": "457-generic"}


@pytest.mark.parametrize("card", CARDS)
def test_labels_name_the_card_its_engine_and_the_revision(images, docker_client, card):
    entry = manifest.load().cards[card]
    labels = docker_client.images.get(images[card]["tag"]).labels
    revision = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert labels["io.enginex.card"] == card
    assert labels["io.enginex.vllm-version"] == entry.vllm and labels["io.enginex.transformers-version"] == entry.transformers
    assert labels["org.opencontainers.image.revision"] == revision and labels["org.opencontainers.image.version"] == "dev"
    assert labels["org.opencontainers.image.base.name"] == images[card]["base"]


@pytest.mark.parametrize("card", CARDS)
def test_the_release_gate_passes_on_the_image(images, docker_client, card, tmp_path):
    """`docker run --rm --network none IMAGE selftest --card CARD --json`, as the release runs it."""
    report = release.selftest(docker_client, card, images[card]["tag"], str(tmp_path / "selftest.json"))
    assert report["passed"] and report["image_id"] == images[card]["id"]
    clean = CLEAN_MODEL[card]
    assert [c["name"] for c in report["checks"]] == ["python", "import", "profile", "v5-generic", clean, "models"]
    assert report["models"][clean] == {"repairs": [], "findings": [], "args": [], "env": {}}
    transformers5 = manifest.load().cards[card].transformers.startswith("5.")
    # The transformers-5 model needs the tokenizer overlay on every engine older than transformers 5.
    assert ("--tokenizer" in report["models"]["v5-generic"]["args"]) is not transformers5


def test_users_read_the_selftest_line_by_line(images, containers):
    """`docker run --rm IMAGE selftest`, by hand: a line per check (the gate above runs it on
    every image; one is enough to hold the human form)."""
    card = "iluvatar-bi100"
    status, out, err = containers.run_to_end("selftest", images[card]["tag"], ["selftest"], network_mode="none")
    lines = out.splitlines()
    assert status == 0, out + err
    assert lines[-1] == "selftest: passed (6/6 checks)"
    entry = manifest.load().cards[card]
    assert f"ok   profile: {card}: vLLM {entry.vllm}, transformers {entry.transformers}" in out


def _flatten(data, path=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _flatten(value, path + (key,))
    else:
        yield path, data


@pytest.mark.parametrize("card", CARDS)
def test_the_profile_is_baked_from_the_images_own_engine(images, containers, card):
    """Equal to the committed profile (`make profiles`, from the same engines outside the image),
    but where the image's build patches change what the engine reads, named above."""
    baked = json.loads(in_image(containers, images[card]["tag"], "profile", "cat", f"{IMAGE_HOME}/common/profiles/{card}.json"))
    committed = json.loads((ROOT / "common" / "profiles" / f"{card}.json").read_text())
    baked_flat, committed_flat = dict(_flatten(baked)), dict(_flatten(committed))
    differences = {
        key: (committed_flat.get(key), baked_flat.get(key))
        for key in set(baked_flat) | set(committed_flat)
        if baked_flat.get(key) != committed_flat.get(key)
    }
    assert differences == BAKED_DIFFERENCES.get(card, {})
    assert in_image(containers, images[card]["tag"], "image-card", "cat", f"{IMAGE_HOME}/common/profiles/IMAGE_CARD").strip() == card


@pytest.mark.parametrize("card", CARDS)
def test_every_build_step_ran_in_the_image(images, docker_client, card):
    """The history holds each RUN of the rendered Dockerfile, the patches of the card included
    (a failing step would have failed the build)."""
    entry = manifest.load().cards[card]
    history = " ".join(layer.get("CreatedBy", "") for layer in docker_client.images.get(images[card]["tag"]).history())
    assert "compat_build.image_steps.bake_profile" in history and "common.vllm_plugin_check" in history
    library = [code for code in entry.build_patches if code != "L3"]
    if library:
        assert f"compat_build.image_steps.apply_patches {' '.join(library)}" in history
    assert ("install_patched_ops" in history) is ("L3" in entry.build_patches)


# What each image repairs in a model saved by transformers 5 (TokenizersBackend, a list of
# extra_special_tokens, rope_parameters): its own engine decides. hygon-k100's L1 taught its
# transformers the list form; transformers 5 (@next) reads all of it.
TRANSFORMERS5_REPAIRS = {
    "hygon-k100": {"R3b", "R5"},
    "iluvatar-bi100": {"R3b", "R5"},
    "nv-a100": {"R3", "R3b", "R5"},
    "nv-a100@next": set(),
}


@pytest.mark.parametrize("card", CARDS)
def test_doctor_inside_the_image_is_the_users_pre_submit_check(images, containers, image_models, card):
    """`docker run --rm -v MODEL:/model:ro IMAGE doctor --json`: the image's card, each repair
    verified by the image's own engine (its Python is the engine Python)."""
    volumes = {str(image_models("v5-greedy")): {"bind": "/model", "mode": "ro"}}
    status, out, err = containers.run_to_end("doctor", images[card]["tag"], ["doctor", "--json"], volumes=volumes, network_mode="none")
    data = json.loads(out)
    assert data["card"] == card and data["model_dir"] == "/model"
    assert data["verdict"] == "starts" and status == 0, out + err
    assert {r["code"] for r in data["repairs"]} == TRANSFORMERS5_REPAIRS[card]
    assert all(r["verified"] for r in data["repairs"])


def test_doctor_inside_the_image_reads_as_a_table(images, containers, image_models):
    card = "iluvatar-bi100"
    volumes = {str(image_models("v5-greedy")): {"bind": "/model", "mode": "ro"}}
    status, out, err = containers.run_to_end("doctor-text", images[card]["tag"], ["doctor"], volumes=volumes, network_mode="none")
    assert status == 0 and f"verdict: the {card} image will start this model" in out, out + err
    assert "| R3b | tokenizer_class unknown to the engine's transformers |" in out
