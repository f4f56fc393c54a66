"""compat_build.prune's decisions that need no daemon: the tests' registry tags it drops, the
times it reads, and whether a container's owner is gone (compat_build.owner). The removals
themselves run on the real daemon and registry in tests/images/test_prune.py."""

import os
import subprocess
import time

from compat_build import owner, prune


def _tag(repositories, repository: str, tag: str, mtime: float) -> str:
    path = os.path.join(repositories, repository, "_manifests", "tags", tag)
    os.makedirs(os.path.join(path, "current"))
    link = os.path.join(path, "current", "link")
    with open(link, "w") as fh:
        fh.write("sha256:" + "0" * 64)
    os.utime(link, (mtime, mtime))
    return path


def test_every_registry_tag_but_each_repositorys_newest_is_stale(tmp_path):
    repositories = str(tmp_path / "repositories")
    now = time.time()
    old = _tag(repositories, "enginex-compat/vllm-compat-nv-a100-next", "v0.0.1", now - 7200)
    older = _tag(repositories, "enginex-compat/vllm-compat-nv-a100-next", "v0.0.0", now - 9000)
    newest = _tag(repositories, "enginex-compat/vllm-compat-nv-a100-next", "v0.0.2", now - 60)
    alone = _tag(repositories, "enginex-compat/other", "v1", now - 99999)
    stale = prune.stale_tags(repositories)
    assert sorted(stale) == sorted([old, older])
    assert newest not in stale and alone not in stale


def test_docker_times_are_read_in_utc():
    assert prune.parse_time("1970-01-01T00:00:10.123456789Z") == 10.0
    assert prune.parse_time("1970-01-01T01:00:10+01:00") == 10.0
    assert prune.parse_time("yesterday") is None
    assert prune.age(90) == "2 min" and prune.age(5400) == "1.5 h" and prune.age(3 * 86400) == "3.0 days"


def test_a_test_version_tag_says_when_it_was_made():
    match = prune.TEST_VERSION.match(f"v0.0.{time.time_ns()}")
    assert match and abs(int(match.group(1)) / 1e9 - time.time()) < 60
    assert prune.TEST_REGISTRY.match("127.0.0.1:40123/enginex-compat/vllm-compat-nv-a100-next")
    assert not prune.TEST_REGISTRY.match("harbor.4pd.io/enginex-compat/vllm-compat-nv-a100")


def test_an_owner_is_alive_while_its_process_runs_and_not_after():
    assert owner.alive(owner.owner()) is True
    proc = subprocess.Popen(["sleep", "30"])
    label = owner.owner(proc.pid)
    assert owner.alive(label) is True
    proc.kill()
    proc.wait()
    assert owner.alive(label) is False
    # Another machine's, or a value that is not an owner: cannot be told, so left alone.
    assert owner.alive("elsewhere/1/1") is None and owner.alive("garbage") is None
