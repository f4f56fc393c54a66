"""`make docker-prune` and `make test`'s sweep (compat_build.prune) on the real daemon and a real
registry: a killed run's containers and test tags go and a live run's stay, superseded builds go,
the tests' registry keeps each repository's newest tag and loses the blobs no tag references. The
whole prune runs dry here (the daemon may be shared with other checkouts): it names a superseded
base and a stand-in under a release name, and never a current base.

The images are a few bytes each (`docker import` of a one-file tar), labelled as the project's.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import pytest
from docker.errors import ImageNotFound

from compat_build import local_bases, owner
from tests.images.conftest import python_module
from harness.ports import free_port

PROJECT = "io.enginex.card=prune-test"


def tiny(client, tag: str, *labels: str) -> str:
    """A one-file image tagged `tag`, unique content; its id."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        body = uuid.uuid4().hex.encode()
        info = tarfile.TarInfo("marker")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    repository, _, version = tag.rpartition(":")
    changes = [f"LABEL {label}" for label in (PROJECT, *labels)] + ['CMD ["/marker"]']
    client.api.import_image_from_data(data.getvalue(), repository=repository, tag=version, changes=changes)
    return client.images.get(tag).id


def sweep(*args: str, env=None):
    result = python_module("compat_build.prune", "--sweep", *args, env=env)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
    return result.stdout


def gone(client, ref: str) -> bool:
    return not client.images.list(name=ref)


def dead_owner() -> str:
    proc = subprocess.Popen(["sleep", "30"])
    label = owner.owner(proc.pid)
    proc.kill()
    proc.wait()
    return label


def test_the_sweep_removes_a_killed_runs_containers_and_test_tags_not_a_live_runs(docker_client):
    client = docker_client
    name = f"standin.invalid/enginex-compat/prune-test-{uuid.uuid4().hex[:8]}"
    tiny(client, f"{name}:dev")
    dead = client.containers.create(f"{name}:dev", ["/marker"], labels={owner.LABEL: dead_owner()})
    live = client.containers.create(f"{name}:dev", ["/marker"], labels=owner.labels())
    registry = f"127.0.0.1:{free_port()}/enginex-compat/prune-test"
    old = f"{registry}:v0.0.{time.time_ns() - 4 * 3600 * 10**9}"
    new = f"{registry}:v0.0.{time.time_ns()}"
    for ref in (old, new):
        client.images.get(f"{name}:dev").tag(ref)
    try:
        out = sweep()
        assert f"removed container {dead.id[:12]}" in out and "its owner" in out and "is gone" in out
        assert f"removed {old} (a test tag 4.0 h old)" in out
        assert gone(client, old) and not gone(client, new)
        assert [c.id for c in client.containers.list(all=True, filters={"id": live.id})] == [live.id]
        assert client.containers.list(all=True, filters={"id": dead.id}) == []
    finally:
        live.remove(force=True)
        for ref in (new, old, f"{name}:dev"):
            if not gone(client, ref):
                client.images.remove(ref, force=True)


def test_the_sweep_removes_superseded_builds(docker_client):
    """A stand-in rebuilt under the same tag leaves its predecessor untagged: swept (here without
    the ten minutes' grace a build in progress gets)."""
    client = docker_client
    tag = f"standin.invalid/enginex-compat/prune-test-{uuid.uuid4().hex[:8]}:dev"
    first = tiny(client, tag)
    second = tiny(client, tag)
    try:
        assert client.images.get(first).tags == []  # dangling now
        time.sleep(2)  # Docker's `until` counts whole seconds
        out = sweep("--dangling-minutes", "0")
        assert "removed the project's dangling images" in out
        with pytest.raises(ImageNotFound):
            client.images.get(first)
        assert client.images.get(tag).id == second
    finally:
        client.images.remove(tag, force=True)


def test_the_sweep_collects_the_registrys_unreferenced_blobs(docker_client, registry_binary, tmp_path):
    """A registry of its own (the sweep's storage follows XDG_CACHE_HOME): two pushes to one
    repository; the older tag goes with the blobs only it referenced, the newest stays whole."""
    binary = registry_binary
    client = docker_client
    cache = tmp_path / "cache"
    storage = cache / "enginex-compat" / "registry"
    storage.mkdir(parents=True)
    port = free_port()
    config = tmp_path / "config.yml"
    config.write_text(
        f"version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {storage}}}}}\nhttp: {{addr: 127.0.0.1:{port}}}\n"
    )
    served = subprocess.Popen([binary, "serve", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    repository = f"127.0.0.1:{port}/enginex-compat/prune-test"
    digests = {}
    try:
        time.sleep(1)
        for version in ("older", "newer"):
            tiny(client, f"{repository}:{version}")
            for chunk in client.api.push(repository, tag=version, stream=True, decode=True):
                assert "error" not in chunk, chunk
                digests[version] = (chunk.get("aux") or {}).get("Digest") or digests.get(version)
            time.sleep(1.1)  # the tags' times differ
    finally:
        served.terminate()
        served.wait(timeout=30)
        for version in ("older", "newer"):
            if not gone(client, f"{repository}:{version}"):
                client.images.remove(f"{repository}:{version}", force=True)
    tags = storage / "docker/registry/v2/repositories/enginex-compat/prune-test/_manifests/tags"
    blobs = storage / "docker/registry/v2/blobs/sha256"

    def blob(digest: str) -> Path:
        hexa = digest.split(":", 1)[1]
        return blobs / hexa[:2] / hexa / "data"

    assert sorted(os.listdir(tags)) == ["newer", "older"] and blob(digests["older"]).exists()
    out = sweep(env={"XDG_CACHE_HOME": str(cache)})
    assert "removed 1 old tags from the tests' registry" in out and "blobs no tag references collected" in out
    assert sorted(os.listdir(tags)) == ["newer"]
    assert not blob(digests["older"]).exists() and blob(digests["newer"]).exists()


def test_the_whole_prune_names_superseded_bases_and_release_named_stand_ins_never_current_ones(docker_client):
    client = docker_client
    superseded = "enginex-compat/base-engine-next:000000000000"
    release_named = f"harbor.4pd.io/enginex-compat/prune-test-{uuid.uuid4().hex[:8]}:dev"
    tiny(client, superseded)
    tiny(client, release_named, "org.opencontainers.image.base.name=enginex-compat/base-engine-next:000000000000")
    try:
        result = python_module("compat_build.prune", "--dry-run", "--base-grace-hours", "0")
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stdout + result.stderr
        out = result.stdout
        assert f"would remove {superseded} (a superseded local base)" in out
        assert (
            f"would remove {release_named} (a stand-in built on enginex-compat/base-engine-next:000000000000 under a release name)" in out
        )
        rootfs, bases = local_bases.load_spec()
        for base in bases.values():
            assert f"would remove {local_bases.tag_of(rootfs, base)} " not in out
        assert client.images.get(superseded) and client.images.get(release_named)  # a dry run removes nothing
    finally:
        client.images.remove(release_named, force=True)
        client.images.remove(superseded, force=True)
