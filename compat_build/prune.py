"""What the project left in Docker and in its cache, removed: `python -m compat_build.prune [--sweep]`.

`make docker-prune` runs it whole; `make test` runs `--sweep` first (a test run's own leftovers).
Each line says what went and why; the last says how much disk it freed.

  containers  containers the project started (label io.enginex.owner: the release gate's, the
              image tier's) whose owner process is gone, running or not: what a killed run left.
              Whole prune only: the stopped containers of the project's images that carry no
              owner (what runs of older checkouts left)
  test tags   the tests' registry names in the daemon (127.0.0.1:PORT/enginex-compat/...) older
              than --grace-hours: a killed release test's (a finished one removes its own)
  dangling    untagged images of the project (label io.enginex.card) older than ten minutes: the
              builds a new one superseded, and their build cache with them
  registry    the tests' registry storage: every tag but each repository's newest (whose blobs, a
              whole engine base among them, save the next push minutes), then its garbage
              collection removes the blobs no tag references; skipped while a test session
              serves it
  stand-ins   whole prune only: images built on a local base but named like a release's (older
              checkouts named their stand-ins so)
  bases       whole prune only: local bases (enginex-compat/base-NAME:KEY) that are not this
              checkout's current ones and that no checkout on this machine used within
              --base-grace-hours; Docker keeps one that an image or a container still uses
  root fs     whole prune only: debootstrap root filesystems of another spec, same grace

Nothing is forced: an image a container or another image uses stays, and is named. Uses the
docker command (the one with-docker.sh puts on DOCKER_HOST) and the standard library only, so it
runs before the venvs exist.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from . import cache, local_bases, owner
from . import manifest as manifest_mod

GB = 1 << 30
HOUR = 3600.0
PROJECT_LABEL = "io.enginex.card"  # every card image, stand-in or not
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_REPOSITORY = local_bases.REPOSITORY.format(name="")  # enginex-compat/base-
# The tests push to Debian's docker-registry on 127.0.0.1 (tests/images/conftest.py).
TEST_REGISTRY = re.compile(r"^(?:127\.0\.0\.1|localhost)(?::\d+)?/enginex-compat/")
TEST_VERSION = re.compile(r"^v0\.0\.(\d{18,20})$")  # tests/images/test_release.py's unique_version()
DANGLING_AFTER_MIN = 10.0  # a build's last image is untagged for a moment before its tag lands


def registry_storage() -> str:
    """The tests' registry storage: it outlives the runs, like the daemon's layers."""
    return os.path.join(cache.root(), "registry")


def registry_lock() -> str:
    """A test session holds it shared while its registry serves; the prune takes it exclusive."""
    return registry_storage() + ".lock"


class Pruner:
    def __init__(self, dry_run: bool = False, out=sys.stdout, dangling_after_min: float = DANGLING_AFTER_MIN) -> None:
        self.dry_run, self.out = dry_run, out
        self.dangling_after = f"{int(dangling_after_min * 60)}s"
        self.removed = 0

    def say(self, text: str) -> None:
        self.out.write(f"prune: {text}\n")
        self.out.flush()

    def docker(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)

    def lines(self, *args: str) -> List[str]:
        proc = self.docker(*args)
        return [line for line in proc.stdout.splitlines() if line.strip()] if proc.returncode == 0 else []

    def remove(self, what: str, why: str, *cmd: str) -> bool:
        """Run a removal (unless --dry-run) and say it; False with Docker's reason when it refused."""
        if self.dry_run:
            self.say(f"would remove {what} ({why})")
            return True
        proc = self.docker(*cmd)
        if proc.returncode != 0:
            reason = (proc.stderr.strip().splitlines() or ["refused"])[-1]
            self.say(f"kept {what}: {reason}")
            return False
        self.removed += 1
        self.say(f"removed {what} ({why})")
        return True

    # -- containers ----------------------------------------------------------------------------

    def containers(self, whole: bool) -> None:
        fmt = '{{.ID}}\t{{.State}}\t{{.Image}}\t{{.Label "' + owner.LABEL + '"}}'
        for line in self.lines("ps", "-a", "--no-trunc", "--filter", f"label={owner.LABEL}", "--format", fmt):
            cid, state, image, who = (line.split("\t") + ["", "", ""])[:4]
            if owner.alive(who) is False:
                self.remove(f"container {cid[:12]} of {image} ({state})", f"its owner {who} is gone", "rm", "-f", "-v", cid)
        if not whole:
            return
        for label in (PROJECT_LABEL, local_bases.LABEL):
            for status in ("exited", "created", "dead"):
                fmt = '{{.ID}}\t{{.Image}}\t{{.Label "' + owner.LABEL + '"}}'
                for line in self.lines(
                    "ps", "-a", "--no-trunc", "--filter", f"label={label}", "--filter", f"status={status}", "--format", fmt
                ):
                    cid, image, who = (line.split("\t") + ["", ""])[:3]
                    if not who:
                        self.remove(f"container {cid[:12]} of {image} ({status})", "stopped, of a project image, no owner", "rm", "-v", cid)

    # -- images --------------------------------------------------------------------------------

    def images(self) -> List[Tuple[str, str, str]]:
        """(repository, tag, id) of every tagged image."""
        out = []
        for line in self.lines("images", "--no-trunc", "--format", "{{.Repository}}\t{{.Tag}}\t{{.ID}}"):
            repo, tag, iid = (line.split("\t") + ["", ""])[:3]
            if repo != "<none>" and tag != "<none>":
                out.append((repo, tag, iid))
        return out

    def created(self, ref: str) -> Optional[float]:
        proc = self.docker("image", "inspect", "-f", "{{.Created}}", ref)
        return parse_time(proc.stdout.strip()) if proc.returncode == 0 else None

    def label(self, ref: str, key: str) -> str:
        proc = self.docker("image", "inspect", "-f", '{{index .Config.Labels "' + key + '"}}', ref)
        value = proc.stdout.strip() if proc.returncode == 0 else ""
        return "" if value == "<no value>" else value

    def test_tags(self, grace_s: float) -> None:
        now = time.time()
        for repo, tag, _ in self.images():
            if not TEST_REGISTRY.match(repo):
                continue
            ref = f"{repo}:{tag}"
            version = TEST_VERSION.match(tag)
            made = int(version.group(1)) / 1e9 if version else self.created(ref)
            if made is not None and now - made >= grace_s:
                self.remove(ref, f"a test tag {age(now - made)} old", "rmi", ref)

    def release_named_standins(self) -> None:
        for repo, tag, _ in self.images():
            ref = f"{repo}:{tag}"
            if manifest_mod.is_standin(ref) or TEST_REGISTRY.match(repo) or repo.startswith(BASE_REPOSITORY):
                continue
            base = self.label(ref, BASE_NAME_LABEL)
            if base.startswith(BASE_REPOSITORY) and self.label(ref, PROJECT_LABEL):
                self.remove(ref, f"a stand-in built on {base} under a release name", "rmi", ref)

    def dangling(self) -> None:
        if self.dry_run:
            for line in self.lines("images", "-q", "--no-trunc", "--filter", "dangling=true", "--filter", f"label={PROJECT_LABEL}"):
                self.say(f"would remove dangling image {line[:19]}")
            return
        proc = self.docker("image", "prune", "-f", "--filter", f"label={PROJECT_LABEL}", "--filter", f"until={self.dangling_after}")
        gone = [line for line in proc.stdout.splitlines() if line.startswith("deleted:")]
        reclaimed = [line for line in proc.stdout.splitlines() if line.startswith("Total reclaimed space")]
        if proc.returncode != 0:
            self.say(f"dangling images: docker image prune failed: {proc.stderr.strip()}")
        elif gone:
            self.removed += 1
            self.say(
                f"removed the project's dangling images ({len(gone)} layers; {reclaimed[0].split(':', 1)[1].strip() if reclaimed else ''})"
            )

    def bases(self, grace_s: float) -> None:
        rootfs, bases = local_bases.load_spec()
        current: Set[str] = set()
        unknown: Set[str] = set()  # a base whose venv is not here: its key cannot be told, keep them all
        for base in bases.values():
            try:
                current.add(local_bases.tag_of(rootfs, base))
            except local_bases.BaseError:
                unknown.add(local_bases.REPOSITORY.format(name=base.name))
        now = time.time()
        for repo, tag, _ in self.images():
            ref = f"{repo}:{tag}"
            if not repo.startswith(BASE_REPOSITORY) or ref in current or repo in unknown:
                continue
            used = max(filter(None, (local_bases.last_use(ref), self.created(ref))), default=None)
            if used is not None and now - used < grace_s:
                self.say(f"kept {ref}: superseded here, but used {age(now - used)} ago (another checkout may build on it)")
                continue
            self.remove(ref, "a superseded local base", "rmi", ref)

    def root_filesystems(self, grace_s: float) -> None:
        rootfs, _ = local_bases.load_spec()
        keep = f"rootfs-{local_bases.rootfs_key(rootfs)}"
        top = local_bases.cache_dir()
        if not os.path.isdir(top):
            return
        now = time.time()
        for name in sorted(os.listdir(top)):
            path = os.path.join(top, name)
            if not name.startswith("rootfs-") or name == keep or not os.path.isdir(path):
                continue
            used = max(filter(None, (local_bases.last_use(name), _mtime(os.path.join(path, ".complete")))), default=None)
            if used is not None and now - used < grace_s:
                self.say(f"kept {path}: another spec's, but used {age(now - used)} ago")
                continue
            if self.dry_run:
                self.say(f"would remove {path} (a root filesystem of another spec)")
                continue
            with open(path + ".lock", "w") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    self.say(f"kept {path}: in use (its lock is held)")
                    continue
                shutil.rmtree(path, ignore_errors=True)
                os.unlink(path + ".lock")
            self.removed += 1
            self.say(f"removed {path} (a root filesystem of another spec)")

    # -- the tests' registry -------------------------------------------------------------------

    def registry(self) -> None:
        storage = registry_storage()
        repositories = os.path.join(storage, "docker", "registry", "v2", "repositories")
        if not os.path.isdir(repositories):
            return
        os.makedirs(os.path.dirname(registry_lock()), exist_ok=True)
        with open(registry_lock(), "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                self.say(f"kept the tests' registry at {storage}: a test session serves it now")
                return
            stale = stale_tags(repositories)
            for path in stale:
                if self.dry_run:
                    self.say(f"would remove registry tag {os.path.relpath(path, repositories)}")
                else:
                    shutil.rmtree(path, ignore_errors=True)
            if stale and not self.dry_run:
                self.say(f"removed {len(stale)} old tags from the tests' registry (each repository keeps its newest)")
            if not self.dry_run:
                self.collect_garbage(storage)

    def collect_garbage(self, storage: str) -> None:
        binary = shutil.which("docker-registry")
        if binary is None:
            self.say("the tests' registry blobs stay: docker-registry (Debian's package) is not installed to collect them")
            return
        with tempfile.TemporaryDirectory() as tmp:
            config = os.path.join(tmp, "config.yml")
            with open(config, "w", encoding="utf-8") as fh:
                fh.write(f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {storage}}}}}\n")
            before = dir_bytes(storage)
            proc = subprocess.run([binary, "garbage-collect", "--delete-untagged", config], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            self.say(f"the tests' registry: garbage-collect failed: {(proc.stderr or proc.stdout).strip()[-300:]}")
            return
        freed = before - dir_bytes(storage)
        if freed > 0:
            self.removed += 1
            self.say(f"the tests' registry: {size(freed)} of blobs no tag references collected")


def stale_tags(repositories: str) -> List[str]:
    """The tag directories of every repository under `repositories` but its newest."""
    stale = []
    for directory, dirs, _ in os.walk(repositories):
        if os.path.basename(directory) == "tags" and os.path.basename(os.path.dirname(directory)) == "_manifests":
            tags = sorted((os.path.join(directory, d) for d in dirs), key=_mtime_or_zero)
            stale += tags[:-1]
            dirs[:] = []
    return stale


def _mtime(path: str) -> Optional[float]:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _mtime_or_zero(path: str) -> float:
    return _mtime(os.path.join(path, "current", "link")) or _mtime(path) or 0.0


def dir_bytes(top: str) -> int:
    return local_bases.tree_bytes(top)


def parse_time(text: str) -> Optional[float]:
    """Docker's RFC 3339 time (nanoseconds, `Z` or an offset) as epoch seconds."""
    match = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.\d+)?(Z|[+-]\d\d:\d\d)$", text)
    if not match:
        return None
    import calendar

    y, mo, d, h, mi, s = (int(g) for g in match.groups()[:6])
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    zone = match.group(7)
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        seconds -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return float(seconds)


def size(n: float) -> str:
    return f"{n / GB:.2f} GB" if abs(n) >= GB else f"{n / (1 << 20):.1f} MB"


def age(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def free_bytes(paths: Iterable[str]) -> Dict[int, Tuple[str, int]]:
    """{device: (a path on it, bytes free)} for the filesystems of `paths` (those that exist)."""
    seen: Dict[int, Tuple[str, int]] = {}
    for path in paths:
        if path and os.path.exists(path):
            st = os.statvfs(path)
            seen.setdefault(os.stat(path).st_dev, (path, st.f_bavail * st.f_frsize))
    return seen


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="remove what the project left in Docker and its cache")
    parser.add_argument("--sweep", action="store_true", help="only a test run's own leftovers (what `make test` runs first)")
    parser.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    parser.add_argument("--grace-hours", type=float, default=3.0, help="test tags younger than this stay (default 3)")
    parser.add_argument(
        "--base-grace-hours", type=float, default=24.0, help="superseded bases and root filesystems used within this stay (default 24)"
    )
    parser.add_argument(
        "--dangling-minutes",
        type=float,
        default=DANGLING_AFTER_MIN,
        help=f"dangling images younger than this stay (default {DANGLING_AFTER_MIN:g})",
    )
    parser.add_argument("--if-daemon", action="store_true", help="where no Docker daemon answers, say so and prune the cache only")
    opts = parser.parse_args(list(argv) if argv is not None else None)
    pruner = Pruner(opts.dry_run, dangling_after_min=opts.dangling_minutes)
    daemon = local_bases.daemon_answers()
    if not daemon and not opts.if_daemon:
        print("prune: no Docker daemon answers (run it through `make docker-prune`, which starts one)", file=sys.stderr)
        return 1
    data_root = local_bases.docker_root() if daemon else None
    watched = [p for p in (data_root, cache.root()) if p]
    before = free_bytes(watched)
    whole = not opts.sweep
    if daemon:
        pruner.containers(whole)
        pruner.test_tags(opts.grace_hours * HOUR)
        if whole:
            pruner.release_named_standins()
        pruner.dangling()
        if whole:
            pruner.bases(opts.base_grace_hours * HOUR)
    else:
        pruner.say("no Docker daemon answers: its images and containers are not looked at")
    if whole:
        pruner.root_filesystems(opts.base_grace_hours * HOUR)
    pruner.registry()
    after = free_bytes(watched)
    freed = sum(after[dev][1] - before[dev][1] for dev in before if dev in after)
    where = ", ".join(f"{path}: {size(after[dev][1])} free" for dev, (path, _) in after.items())
    what = "sweep" if opts.sweep else "prune"
    if opts.dry_run:
        pruner.say(f"{what}: a dry run, nothing removed ({where})")
    elif pruner.removed:
        pruner.say(f"{what} done: about {size(max(freed, 0))} freed ({where})")
    else:
        pruner.say(f"{what} done: nothing the project left to remove ({where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
