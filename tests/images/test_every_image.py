"""What every image of the matrix promises, checked on the image itself in a real daemon: its
labels and name, its own gate (`selftest`, run as the platform runs the image), the profile it
baked from its own engine, its build steps, and the user's pre-submit check (`doctor` inside the
image)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from common.triage import triage_file
from compat_build import manifest, release
from tests.images.cards import baked_differences, clean_model, transformers5_repairs
from tests.images.conftest import BASE_NAME_LABEL, CARDS, IMAGE_HOME, ROOT, in_image

REVISION = re.compile(r"^[0-9a-f]{40}$")


@pytest.mark.parametrize("card", CARDS)
def test_labels_name_the_card_its_engine_its_base_and_the_revision(images, docker_client, card):
    entry = manifest.load().cards[card]
    image = docker_client.images.get(images[card]["tag"])
    labels = image.labels
    assert labels["io.enginex.card"] == card
    assert labels["io.enginex.vllm-version"] == entry.vllm and labels["io.enginex.transformers-version"] == entry.transformers
    assert REVISION.match(labels["org.opencontainers.image.revision"]), labels
    # The base the label names is the one the image is built on: its layers are the image's first.
    base = docker_client.images.get(labels[BASE_NAME_LABEL])
    base_layers = base.attrs["RootFS"]["Layers"]
    assert image.attrs["RootFS"]["Layers"][: len(base_layers)] == base_layers
    if not images[card].get("given"):
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        assert labels["org.opencontainers.image.revision"] == head and labels["org.opencontainers.image.version"] == "dev"
        assert labels[BASE_NAME_LABEL] == images[card]["base"]


@pytest.mark.parametrize("card", CARDS)
def test_a_stand_in_is_never_named_like_a_release(images, docker_client, card):
    """Built on a local base, the image is named apart from `make build`'s (it overwrites none, and
    no push can publish it): no tag of it is a release repository's."""
    image = images.built_here(card)
    assert manifest.is_standin(image["tag"]) and image["tag"] == manifest.standin_ref(manifest.load(), card, "dev")
    release_repository = manifest.image_ref(manifest.load(), card, "dev").rsplit(":", 1)[0]
    tags = docker_client.images.get(image["id"]).tags
    assert tags and all(manifest.is_standin(t) for t in tags), tags
    assert not any(t.startswith(release_repository + ":") for t in tags)


@pytest.mark.parametrize("card", CARDS)
def test_the_release_gate_passes_on_the_image_run_as_the_platform_runs_it(images, docker_client, card, tmp_path):
    """`docker run --rm --user 54321:54321 --read-only --tmpfs /tmp --network none IMAGE selftest
    --card CARD --json`, as the release runs it: a uid the image does not know, a read-only root,
    and Docker's default tmpfs, which allows no exec."""
    report = release.selftest(docker_client, card, images[card]["tag"], str(tmp_path / "selftest.json"))
    assert report["passed"] and report["image_id"] == images[card]["id"]
    assert report["runtime"] == {"uid": 54321, "gid": 54321, "read_only_root": True, "tmp_noexec": True}
    clean = clean_model(card)
    assert [c["name"] for c in report["checks"]] == ["python", "import", "profile", "v5-generic", clean, "models"]
    assert report["models"][clean] == {"repairs": [], "findings": [], "args": [], "env": {}}
    transformers5 = manifest.load().cards[card].transformers.startswith("5.")
    # The transformers-5 model needs the tokenizer overlay on every engine older than transformers 5.
    assert ("--tokenizer" in report["models"]["v5-generic"]["args"]) is not transformers5


@pytest.mark.parametrize("card", ["iluvatar-bi100"])
def test_users_read_the_selftest_line_by_line(images, containers, card):
    """`docker run --rm IMAGE selftest`, by hand: a line per check (the gate above runs it on
    every image; one is enough to hold the human form)."""
    status, out, err = containers.run_to_end("selftest", images[card]["tag"], ["selftest"], network_mode="none")
    lines = out.splitlines()
    assert status == 0, out + err
    assert lines[-1] == "selftest: passed (6/6 checks)"
    entry = manifest.load().cards[card]
    assert f"ok   profile: {card}: vLLM {entry.vllm}, transformers {entry.transformers}" in out


@pytest.mark.parametrize("card", ["nv-a100@next"])
def test_a_noexec_tmp_is_said_at_start_and_triaged_with_its_fix(images, containers, image_models, card, tmp_path):
    """The platform's start on Docker's default tmpfs (no exec): the launcher says that the
    engine's compiled kernels cannot load from there, and triage names NOEXEC, not `unknown`; with
    the contract's executable /tmp it says nothing. vLLM is `true` here: the start is the point."""
    from harness.containers import platform_run_kwargs

    logs = {}
    for name, tmpfs in (("noexec", {"/tmp": ""}), ("exec", None)):
        run = platform_run_kwargs(image_models("457-generic"), {"COMPAT_VLLM": "true"})
        if tmpfs is not None:
            run["tmpfs"] = tmpfs
        run["network_mode"] = "none"
        status, out, err = containers.run_to_end(f"start-{name}", images[card]["tag"], ["--port", "8000"], **run)
        assert status == 0, out + err
        logs[name] = err
    assert "[compat] /tmp is on a noexec mount" in logs["noexec"] and "(NOEXEC)" in logs["noexec"], logs["noexec"]
    assert "noexec" not in logs["exec"], logs["exec"]
    path = tmp_path / "start.log"
    path.write_text(logs["noexec"])
    verdict = triage_file(str(path))
    assert verdict.code == "NOEXEC" and "--tmpfs /tmp:exec" in verdict.fix


def _flatten(data, path=()):
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _flatten(value, path + (key,))
    else:
        yield path, data


@pytest.mark.parametrize("card", CARDS)
def test_the_profile_is_baked_from_the_images_own_engine(images, containers, card):
    """Equal to the committed profile (`make profiles`, from the same engines outside the image),
    but where the image's build patches change what the engine reads (tests/images/cards.py). A
    given image's engine is not the committed profile's CPU stand-in: skipped for it."""
    tag = images.built_here(card)["tag"]
    baked = json.loads(in_image(containers, tag, "profile", "cat", f"{IMAGE_HOME}/common/engine/profiles/{card}.json"))
    committed = json.loads((ROOT / "common" / "engine" / "profiles" / f"{card}.json").read_text())
    baked_flat, committed_flat = dict(_flatten(baked)), dict(_flatten(committed))
    differences = {
        key: (committed_flat.get(key), baked_flat.get(key))
        for key in set(baked_flat) | set(committed_flat)
        if baked_flat.get(key) != committed_flat.get(key)
    }
    assert differences == baked_differences(card)
    assert in_image(containers, tag, "image-card", "cat", f"{IMAGE_HOME}/common/engine/profiles/IMAGE_CARD").strip() == card


@pytest.mark.parametrize("card", CARDS)
def test_every_build_step_ran_in_the_image(images, docker_client, card):
    """The history holds each RUN of the rendered Dockerfile, the patches of the card included
    (a failing step would have failed the build)."""
    entry = manifest.load().cards[card]
    history = " ".join(layer.get("CreatedBy", "") for layer in docker_client.images.get(images[card]["tag"]).history())
    assert "compat_build.image_steps.bake_profile" in history and "common.build_checks.vllm_plugin_check" in history
    library = [code for code in entry.build_patches if code != "L3"]
    if library:
        assert f"compat_build.image_steps.apply_patches {' '.join(library)}" in history
    assert ("install_patched_ops" in history) is ("L3" in entry.build_patches)


@pytest.mark.parametrize("card", CARDS)
def test_doctor_inside_the_image_is_the_users_pre_submit_check(images, containers, image_models, card):
    """`docker run --rm -v MODEL:/model:ro IMAGE doctor --json`: the image's card, each repair
    verified by the image's own engine (its Python is the engine Python)."""
    volumes = {str(image_models("v5-greedy")): {"bind": "/model", "mode": "ro"}}
    status, out, err = containers.run_to_end("doctor", images[card]["tag"], ["doctor", "--json"], volumes=volumes, network_mode="none")
    assert status == 0, f"doctor exited {status}: {out[-3000:]}{err[-3000:]}"
    data = json.loads(out)
    assert data["card"] == card and data["model_dir"] == "/model"
    assert data["verdict"] == "starts"
    assert {r["code"] for r in data["repairs"]} == transformers5_repairs(card)
    assert all(r["verified"] for r in data["repairs"])


@pytest.mark.parametrize("card", ["iluvatar-bi100"])
def test_doctor_inside_the_image_reads_as_a_table(images, containers, image_models, card):
    volumes = {str(image_models("v5-greedy")): {"bind": "/model", "mode": "ro"}}
    status, out, err = containers.run_to_end("doctor-text", images[card]["tag"], ["doctor"], volumes=volumes, network_mode="none")
    assert status == 0 and f"verdict: the {card} image will start this model" in out, out + err
    assert "| R3b | tokenizer_class unknown to the engine's transformers |" in out
