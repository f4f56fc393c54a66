"""`make build` failing for real, in one sentence, never a traceback: a required patch whose anchor
the base's library lacks stops the build at its step, and a base the daemon has not and cannot
pull is named as it was asked for."""

from tests.images.conftest import python_module

ABSENT_BASE = "enginex-compat/no-such-base:never-made"


def test_a_required_patch_on_a_library_without_its_anchor_stops_the_build(images):
    """hygon-k100's L1 on the transformers-5 engine base: its anchor is gone there."""
    result = python_module("compat_build.build", "hygon-k100", "--version", "broken", "--base-image", images["nv-a100@next"]["base"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "hygon-k100: build step failed: Step" in result.stderr and "apply_patches L1 L2" in result.stderr
    assert "L1 FAILED" in result.stderr and "anchor missing" in result.stderr


def test_a_base_the_daemon_lacks_and_cannot_pull_is_named(docker_client):
    result = python_module("compat_build.build", "nv-a100", "--version", "broken", "--base-image", ABSENT_BASE)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"nv-a100: the base image {ABSENT_BASE} is not on this daemon and cannot be pulled" in result.stderr


def test_release_check_builds_and_gates_every_card_on_the_local_bases(images):
    """`make release-check BASES=local` where a daemon answers: every card built and self-tested."""
    from compat_build import manifest

    cards = manifest.card_names(manifest.load())
    for card in cards:
        images[card]  # built once already: the check's builds come from the daemon's cache
    result = python_module("compat_build.release", "check", "--local-bases", env={"MODELHUB_TOKEN": ""})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for card in cards:
        assert f"ok   {card}: docker build" in result.stdout and f"ok   {card}: selftest" in result.stdout
    assert result.stdout.rstrip().endswith("release-check: the steps run here passed; NOT run here: platform validate")


def test_release_check_on_the_vendor_bases_names_the_base_it_cannot_pull(docker_client):
    result = python_module("compat_build.release", "check", env={"MODELHUB_TOKEN": ""})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        "FAIL nv-a100: docker build: nv-a100: the base image harbor.4pd.io/dooke/vllm/vllm/vllm-openai:v0.11.0 is not on" in result.stdout
    )
