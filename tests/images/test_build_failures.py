"""`make build` failing for real, in one sentence, never a traceback: a required patch whose anchor
the base's library lacks stops the build at its step, and a base the daemon has not and cannot
pull is named as it was asked for. The unpullable base is one no registry can serve by
construction (a port on 127.0.0.1 where nothing listens), whatever this machine's network reaches."""

import socket

import pytest

from compat_build import manifest
from tests.images.conftest import python_module
from harness.ports import free_port


def absent_base() -> str:
    return f"127.0.0.1:{free_port()}/enginex-compat/no-such-base:never-made"


def test_a_required_patch_on_a_library_without_its_anchor_stops_the_build(images):
    """hygon-k100's L1 on the transformers-5 engine base: its anchor is gone there."""
    base = images.built_here("nv-a100@next")["base"]
    result = python_module("compat_build.build", "hygon-k100", "--version", "broken", "--base-image", base)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "hygon-k100: build step failed: Step" in result.stderr and "apply_patches L1 L2" in result.stderr
    assert "L1 FAILED" in result.stderr and "anchor missing" in result.stderr


def test_a_base_the_daemon_lacks_and_cannot_pull_is_named(docker_client):
    absent = absent_base()
    result = python_module("compat_build.build", "nv-a100", "--version", "broken", "--base-image", absent)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"nv-a100: the base image {absent} is not on this daemon and cannot be pulled" in result.stderr


def test_make_build_of_every_card_goes_on_past_a_failure_and_sums_up(docker_client):
    """`make build CARD=all` where no base can be had: every card is tried, each failure named,
    then one summary line per card (exit 1)."""
    absent = absent_base()
    result = python_module("compat_build.build", "all", "--version", "broken", "--base-image", absent)
    cards = manifest.card_names(manifest.load())
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"build: 0 of {len(cards)} cards built (revision " in result.stdout
    for card in cards:
        assert f"building {card} -> " in result.stdout
        assert f"  FAIL {card}: the base image {absent} is not on this daemon and cannot be pulled" in result.stdout


def test_release_check_builds_and_gates_every_card_on_the_local_bases(images):
    """`make release-check BASES=local` where a daemon answers: every card built and self-tested."""
    cards = manifest.card_names(manifest.load())
    for card in cards:
        images.built_here(card)  # built once already: the check's builds come from the daemon's cache
    result = python_module("compat_build.release", "check", "--local-bases", env={"MODELHUB_TOKEN": ""})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for card in cards:
        assert f"ok   {card}: docker build" in result.stdout and f"ok   {card}: selftest" in result.stdout
        assert manifest.standin_ref(manifest.load(), card, "release-check") in result.stdout
    assert result.stdout.rstrip().endswith("release-check: the steps run here passed; NOT run here: platform validate")


def test_release_check_on_the_vendor_bases_names_the_base_it_cannot_pull(docker_client):
    """Where the vendor's registry cannot be reached (no name for it here), the check names the
    base it could not pull. Where it can, this machine would pull the real base: not this test."""
    base = manifest.load().cards["nv-a100"].base_image
    host = base.split("/", 1)[0]
    try:
        socket.getaddrinfo(host, 443)
    except OSError:
        pass
    else:
        pytest.skip(f"{host} resolves here: a release check would pull the vendor's base for real")
    result = python_module("compat_build.release", "check", env={"MODELHUB_TOKEN": ""})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"FAIL nv-a100: docker build: nv-a100: the base image {base} is not on" in result.stdout
