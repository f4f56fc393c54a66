"""The release job on a real daemon and a real registry: build -> selftest -> push -> register,
each step the workflow's own command (`python -m compat_build.build|release ...`).

The image pushed is nv-a100@next: its engine base is the smallest (about 3 GB; nv-a100's is 9 GB)
and the gate is the same for every card. The registry is Debian's docker-registry on 127.0.0.1
(conftest.registry); the platform is the scripted server of tests/conftest.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import TOKEN
from tests.images.conftest import ROOT, python_module
from harness.ports import free_port

CARD = "nv-a100@next"
MANIFEST_TYPES = "application/vnd.docker.distribution.manifest.v2+json"


def release_env(registry: str) -> dict:
    # No REVISION: a build outside CI labels the checkout's commit by itself.
    return {"COMPAT_RELEASE_REGISTRY": f"{registry}/enginex-compat", "DOCKER_HOST": os.environ.get("DOCKER_HOST", ""), "REVISION": ""}


def unique_version() -> str:
    """A tag no earlier run pushed (the registry's storage outlives the runs)."""
    return f"v0.0.{time.time_ns()}"


def registry_digest(registry: str, repository: str, tag: str):
    """What the registry serves for repository:tag: its manifest digest, or None for no such tag."""
    path = repository.split("/", 1)[1]
    request = urllib.request.Request(f"http://{registry}/v2/{path}/manifests/{tag}", method="HEAD", headers={"Accept": MANIFEST_TYPES})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.headers["Docker-Content-Digest"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


def step(*args: str, env: dict):
    result = python_module(*args, env=env)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_release_pushes_the_tested_image_and_registers_the_registrys_digest(images, registry, platform, docker_client, tmp_path):
    env = release_env(registry)
    version = unique_version()
    base = images.built_here(CARD)["base"]
    ref = f"{registry}/enginex-compat/vllm-compat-nv-a100-next:{version}"
    try:
        release_job(registry, platform, docker_client, tmp_path, env, version, base, ref)
    finally:
        # The run's tag leaves the daemon. The registry keeps it: the next run's sweep keeps each
        # repository's newest tag there (its blobs, the engine base's among them, spare the next
        # push minutes) and collects what only older ones referenced (compat_build.prune).
        if docker_client.images.list(name=ref):
            docker_client.images.remove(ref)


def release_job(registry, platform, docker_client, tmp_path, env, version, base, ref):
    built = step("compat_build.build", CARD, "--version", version, "--base-image", base, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    # `make build` outside CI (no --revision, no REVISION) labels the checkout's commit.
    assert docker_client.images.get(ref).labels["org.opencontainers.image.revision"] == head
    assert f"built {ref}" in built.stdout
    report = tmp_path / "selftest.json"
    gate = step("compat_build.release", "selftest", CARD, version, "--report", str(report), env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    tested = json.loads(report.read_text())
    assert tested["passed"] and tested["image"] == ref and tested["image_id"] == docker_client.images.get(ref).id
    pushed = step("compat_build.release", "push", CARD, version, "--tested", str(report), env=env)
    assert pushed.returncode == 0, pushed.stderr
    pushed_ref = pushed.stdout.strip()
    repository = ref.rsplit(":", 1)[0]
    digest = registry_digest(registry, repository, version)
    # What the registry holds, what the daemon recorded, and what gets registered are one digest.
    assert pushed_ref == f"{repository}@{digest}"
    assert pushed_ref in docker_client.images.get(ref).attrs["RepoDigests"]
    platform_env = dict(env, MODELHUB_API=platform["client"].api_base, MODELHUB_TOKEN=TOKEN, GITHUB_ACTOR="ci-bot")
    registered = step("compat_build.release", "register", CARD, pushed_ref, "--tag", version, env=platform_env)
    assert registered.returncode == 0, registered.stderr
    body = json.loads(platform["requests"][0][3])
    assert body["imageUrl"] == pushed_ref and body["tag"] == version and body["framework"] == "vllm_compat_next"
    summary = step("compat_build.release", "summary", CARD, "--report", str(report), "--ref", pushed_ref, "--tag", version, env=env)
    assert f"| registered | `{pushed_ref}` |" in summary.stdout and "| self-test | passed (6/6 checks) |" in summary.stdout
    assert "| self-test ran as | uid 54321, read-only root, /tmp without exec |" in summary.stdout


HOME = "/opt/enginex-compat"
BREAKAGES = {
    # The profile of another card baked into the image (the preflight then plans for that card too).
    "another-cards-profile": (
        f'RUN sed -i \'s/"card": "{CARD}"/"card": "hygon-k100"/\' {HOME}/common/engine/profiles/{CARD}.json',
        ["profile", "v5-generic"],
    ),
    # A runtime package that does not import: the entrypoint starts vLLM untouched.
    "runtime-does-not-import": (
        f"RUN echo 'this is not python(' >> {HOME}/common/start/launch.py",
        ["import", "v5-generic", "457-generic"],
    ),
    # Labelled for another card: never even started.
    "labelled-for-another-card": ("LABEL io.enginex.card=hygon-k100", []),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_image_fails_its_gate_and_is_not_pushed(images, registry, docker_client, tmp_path, breakage):
    instruction, failed = BREAKAGES[breakage]
    env = release_env(registry)
    version = unique_version()
    ref = f"{registry}/enginex-compat/vllm-compat-nv-a100-next:{version}"
    dockerfile = f"FROM {images[CARD]['tag']}\nUSER root\n{instruction}\n"
    broken, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    report = tmp_path / "selftest.json"
    try:
        gate = step("compat_build.release", "selftest", CARD, version, "--report", str(report), env=env)
        pushed = step("compat_build.release", "push", CARD, version, "--tested", str(report), env=env)
        # The gate's container is gone, asked by the image it ran (its id: the tag goes below).
        leftovers = docker_client.containers.list(all=True, filters={"ancestor": broken.id})
    finally:
        docker_client.images.remove(ref, force=True)
    assert gate.returncode == 1 and f"release selftest: {CARD}: {ref} failed its self-test" in gate.stderr
    assert [line.split(":")[0].rsplit(" ", 1)[1] for line in gate.stdout.splitlines() if line.startswith("FAIL")] == failed
    assert not json.loads(report.read_text())["passed"]
    assert pushed.returncode == 1 and "not pushed" in pushed.stderr and pushed.stdout == ""
    assert registry_digest(registry, ref.rsplit(":", 1)[0], version) is None
    if not failed:
        assert "labelled io.enginex.card='hygon-k100'" in gate.stderr
    assert leftovers == []


def test_a_retagged_image_is_not_the_tested_one(images, registry, docker_client, tmp_path):
    """Tagged over after its gate passed: the push refuses it, the registry gets nothing."""
    env = release_env(registry)
    version = unique_version()
    ref = f"{registry}/enginex-compat/vllm-compat-nv-a100-next:{version}"
    docker_client.images.get(images[CARD]["tag"]).tag(ref)
    report = tmp_path / "selftest.json"
    gate = step("compat_build.release", "selftest", CARD, version, "--report", str(report), env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    docker_client.images.build(fileobj=io.BytesIO(f"FROM {ref}\nLABEL retagged=yes\n".encode()), tag=ref, rm=True)
    try:
        pushed = step("compat_build.release", "push", CARD, version, "--tested", str(report), env=env)
    finally:
        docker_client.images.remove(ref, force=True)
    assert pushed.returncode == 1 and "is now image" in pushed.stderr and "that passed the self-test; not pushed" in pushed.stderr
    assert registry_digest(registry, ref.rsplit(":", 1)[0], version) is None


def test_a_registry_that_does_not_answer_fails_the_push_in_one_sentence(images, docker_client, tmp_path):
    absent = f"127.0.0.1:{free_port()}"
    env = release_env(absent)
    version = unique_version()
    ref = f"{absent}/enginex-compat/vllm-compat-nv-a100-next:{version}"
    docker_client.images.get(images[CARD]["tag"]).tag(ref)
    report = tmp_path / "selftest.json"
    try:
        gate = step("compat_build.release", "selftest", CARD, version, "--report", str(report), env=env)
        assert gate.returncode == 0, gate.stdout + gate.stderr
        pushed = step("compat_build.release", "push", CARD, version, "--tested", str(report), env=env)
    finally:
        docker_client.images.remove(ref, force=True)
    assert pushed.returncode == 1 and f"push of {ref} failed" in pushed.stderr and "connection refused" in pushed.stderr.lower()
