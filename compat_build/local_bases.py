"""Local stand-ins for the vendor base images: `python -m compat_build.local_bases [NAME...] [--list]`.

No vendor registry is reachable from a test machine, so every card image is built (by
`make images`, the tests) on a base made here from envs/bases/bases.toml: a Debian root filesystem
(debootstrap, cached) plus one engine venv the tests run and the Python it was made with, imported
into the daemon with `docker import` as `enginex-compat/base-<name>:<key>`. The key hashes
everything the base is made of (the spec, the vendor trees, the rootfs, the venv's own cache key),
so a base is made once and again only when one of those changes.

The venv and its Python keep their absolute paths (a venv's scripts and the interpreter's
library path name them), made readable by any user, since the platform runs images as any uid;
the venv's bin/ is first on PATH, so `python3` and `vllm` are the engine's, as in the vendor images.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

from . import cache
from . import manifest as manifest_mod
from . import toml_files

ROOT = manifest_mod.ROOT
SPEC_DIR = os.path.join(ROOT, "envs", "bases")
SPEC = os.path.join(SPEC_DIR, "bases.toml")
VENDOR_DIR = os.path.join(SPEC_DIR, "vendor")
REPOSITORY = "enginex-compat/base-{name}"
# Bump when the way a base is laid out changes (what goes into the tar, its modes, its config):
# the key then changes and every base is made again.
LAYOUT = 1
LABEL = "io.enginex.local-base"
# Never in a base: package caches and lists of the rootfs, and the interpreter's own
# site-packages and test suite (a venv does not see them). Compiled bytecode stays: a container
# of any uid on a read-only root could not write it, and would compile torch at every start.
ROOTFS_SKIP = ("var/cache/apt/archives/", "var/lib/apt/lists/", "dev/")
PYTHON_SKIP_DIRS = ("site-packages", "test", "idlelib", "tkinter", "ensurepip")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GB = 1 << 30
# Free space asked for before the long steps start (and fail an hour in, half written): debootstrap
# writes a few hundred MB into the cache; an import stores the whole base (its files, counted
# first) in the daemon's data root, plus room for its metadata and the builds on top of it.
ROOTFS_FREE = 2 * GB
IMPORT_MARGIN = 2 * GB
PROGRESS_EVERY_S = 15.0  # a line at least this often while a long step runs (debootstrap, import)


class BaseError(RuntimeError):
    """One sentence for the user: what is missing and which make target provides it."""


@dataclass(frozen=True)
class Base:
    name: str
    venv_link: str  # relative to the checkout, e.g. .venv-engine
    describes: str
    vendor: Tuple[str, ...]


def cache_dir() -> str:
    return os.environ.get("COMPAT_BASES_CACHE") or os.path.join(cache.root(), "bases")


def load_spec(path: str = SPEC) -> Tuple[Dict, Dict[str, Base]]:
    data = toml_files.load(path)
    rootfs = data.get("rootfs") or {}
    for key in ("suite", "mirror", "packages"):
        if key not in rootfs:
            raise BaseError(f"{os.path.relpath(path, ROOT)} [rootfs]: key {key!r} missing")
    bases = {}
    for name, entry in sorted((data.get("base") or {}).items()):
        if not isinstance(entry, dict) or not isinstance(entry.get("venv"), str):
            raise BaseError(f"{os.path.relpath(path, ROOT)} [base.{name}]: key 'venv' must name a venv link")
        vendor = tuple(entry.get("vendor") or ())
        for tree in vendor:
            if not os.path.isdir(os.path.join(VENDOR_DIR, tree)):
                raise BaseError(f"[base.{name}] vendor tree {tree!r} has no folder envs/bases/vendor/{tree}/")
        bases[name] = Base(name, entry["venv"], entry.get("describes", ""), vendor)
    return rootfs, bases


def base_for_card(card: manifest_mod.Card, bases: Dict[str, Base]) -> Base:
    """The base a card is built on here: the one made of the venv the card's profile snapshots."""
    for base in bases.values():
        if base.venv_link == card.snapshot_env:
            return base
    raise BaseError(f"{card.name}: no base in envs/bases/bases.toml is made of {card.snapshot_env} (its snapshot_env)")


def cards_on(base: str) -> List[str]:
    """The cards of the matrix built on the base named `base` (envs/bases/bases.toml)."""
    manifest = manifest_mod.load()
    _, bases = load_spec()
    if base not in bases:
        raise BaseError(f"no base {base!r} in envs/bases/bases.toml (there: {', '.join(sorted(bases))})")
    return [name for name in manifest_mod.card_names(manifest) if base_for_card(manifest.cards[name], bases).name == base]


def _hash_files(digest, paths: Iterable[str]) -> None:
    for path in sorted(paths):
        digest.update(os.path.relpath(path, ROOT).encode() + b"\0")
        with open(path, "rb") as fh:
            digest.update(fh.read())


def _tree_files(top: str) -> List[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(top) for f in files if "__pycache__" not in d]


def rootfs_key(rootfs: Dict) -> str:
    text = repr((LAYOUT, rootfs["suite"], rootfs["mirror"], sorted(rootfs["packages"])))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def venv_dir(base: Base) -> str:
    link = os.path.join(ROOT, base.venv_link)
    target = os.path.realpath(link)
    if not os.path.isfile(os.path.join(target, "bin", "python")):
        make = base.venv_link.lstrip(".").replace("venv-", "") + "-env"
        raise BaseError(f"base {base.name}: {base.venv_link} is missing: run `make {make}` first")
    return target


def base_key(rootfs: Dict, base: Base) -> str:
    """What the base is made of: layout, rootfs, the spec, its vendor trees, and the venv's cache
    directory name (scripts/make-venv.sh names it by the hash of the venv's spec)."""
    digest = hashlib.sha256(f"{LAYOUT}\0{rootfs_key(rootfs)}\0{base}\0{os.path.basename(venv_dir(base))}\0".encode())
    for tree in base.vendor:
        _hash_files(digest, _tree_files(os.path.join(VENDOR_DIR, tree)))
    return digest.hexdigest()[:12]


def tag_of(rootfs: Dict, base: Base) -> str:
    return f"{REPOSITORY.format(name=base.name)}:{base_key(rootfs, base)}"


def daemon_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "-f", "{{.Server.Version}}"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


NO_DAEMON = "no Docker daemon answers: nothing built (the image tier skips, and fails under CI)"


def used_dir() -> str:
    """Where each base's and root filesystem's last use is stamped (a file's mtime): `make
    docker-prune` keeps what any checkout on this machine used lately, whatever its key is here."""
    return os.path.join(cache_dir(), "used")


def _stamp(name: str) -> str:
    """The stamp file of a base's tag or a root filesystem's directory name."""
    return os.path.join(used_dir(), name.replace("/", "+").replace(":", "+"))


def stamp_use(name: str) -> None:
    try:
        os.makedirs(used_dir(), exist_ok=True)
        with open(_stamp(name), "a"):
            pass
        os.utime(_stamp(name))
    except OSError:  # a stamp is a courtesy to the prune, never a reason to fail a build
        pass


def last_use(name: str) -> Optional[float]:
    try:
        return os.stat(_stamp(name)).st_mtime
    except OSError:
        return None


def need_free(path: str, needed: int, what: str) -> None:
    """BaseError when the filesystem of `path` has less than `needed` bytes free."""
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    free = st.f_bavail * st.f_frsize
    if free < needed:
        raise BaseError(
            f"{what} needs about {needed / GB:.1f} GB free at {probe}, and {free / GB:.1f} GB are: "
            "`make docker-prune` removes what the project left (superseded bases and root filesystems, "
            "old test images), or free space there"
        )


def ensure_rootfs(rootfs: Dict, out=sys.stdout) -> str:
    """The Debian root filesystem, made once per spec with debootstrap (root and Debian's packages
    needed); returns its directory. Bases imported side by side (`make -j`) wait for one another
    here, so that it is made once."""
    target = os.path.join(cache_dir(), f"rootfs-{rootfs_key(rootfs)}")
    os.makedirs(cache_dir(), exist_ok=True)
    with open(target + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(target, ".complete")):
            _debootstrap(rootfs, target, out)
    stamp_use(os.path.basename(target))
    return target


def _debootstrap(rootfs: Dict, target: str, out) -> None:
    if os.geteuid() != 0:
        raise BaseError("making the base images' root filesystem needs root (debootstrap)")
    need_free(cache_dir(), ROOTFS_FREE, "debootstrap")
    subprocess.run([os.path.join(ROOT, "scripts", "apt-install.sh"), "debootstrap"], check=True)
    shutil.rmtree(target, ignore_errors=True)
    os.makedirs(target)
    out.write(f"local-bases: debootstrap {rootfs['suite']} into {target} (about a minute with a warm mirror)\n")
    out.flush()
    cmd = ["debootstrap", "--variant=minbase", "--include=" + ",".join(rootfs["packages"])]
    proc = subprocess.Popen(
        [*cmd, rootfs["suite"], os.path.join(target, "fs"), rootfs["mirror"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    tail = _debootstrap_progress(proc.stdout, out)
    if proc.wait() != 0:
        raise BaseError(f"debootstrap failed (exit {proc.returncode}):\n" + "\n".join(tail[-15:]))
    open(os.path.join(target, ".complete"), "w").close()


def _debootstrap_progress(lines, out) -> List[str]:
    """debootstrap's `I: Retrieving ...`, `I: Unpacking ...` lines, one when its phase changes
    and otherwise one every PROGRESS_EVERY_S; returns the last lines for an error message."""
    tail: List[str] = []
    phase, said, count = "", 0.0, 0
    for line in lines:
        line = line.rstrip()
        tail = (tail + [line])[-30:]
        if not line.startswith("I: "):
            continue
        count += 1
        verb = line[3:].split(" ", 1)[0]
        now = time.monotonic()
        if verb != phase or now - said >= PROGRESS_EVERY_S:
            out.write(f"local-bases: debootstrap: {line[3:]}" + (f" (step {count})" if verb == phase else "") + "\n")
            out.flush()
            phase, said = verb, now
    return tail


def _python_home(venv: str) -> str:
    """The prefix of the interpreter the venv was made with (pyvenv.cfg's home is its bin/)."""
    with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition("=")
            if key.strip() == "home":
                return os.path.dirname(value.strip())
    raise BaseError(f"{venv}/pyvenv.cfg names no home")


def _site_packages(venv: str) -> str:
    lib = os.path.join(venv, "lib")
    [version] = [d for d in os.listdir(lib) if d.startswith("python")]
    return os.path.join(lib, version, "site-packages")


def _readable(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Any uid may read every file and enter every directory; what its owner may run, all may."""
    if info.isdir() or info.mode & 0o100:
        info.mode |= 0o555
    else:
        info.mode |= 0o444
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _parents(path: str) -> List[str]:
    """The archive names of every directory above `path` ("root", "root/.cache", ...)."""
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _add_tree(tar: tarfile.TarFile, top: str, arc_top: str, skip_dirs: Tuple[str, ...] = (), readable: bool = True) -> None:
    for directory, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs)
        rel = os.path.relpath(directory, top)
        arc_dir = arc_top if rel == "." else f"{arc_top}/{rel}"
        for name in [""] + sorted(files) + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name) if name else directory
            info = tar.gettarinfo(path, arcname=f"{arc_dir}/{name}" if name else arc_dir)
            if readable:
                info = _readable(info)
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)


def _add_rootfs(tar: tarfile.TarFile, fs: str, open_dirs: set) -> set:
    """The Debian tree; the directories in `open_dirs` (above the engine: /root among them) are
    made enterable by any user. Returns the directory names it added."""
    added = set()
    for directory, dirs, files in os.walk(fs):
        rel = os.path.relpath(directory, fs)
        arc_dir = "" if rel == "." else rel
        dirs.sort()
        for name in [""] + sorted(files) + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            arc = f"{arc_dir}/{name}".strip("/") if name else arc_dir
            if not arc or any(arc.startswith(s) and arc != s.rstrip("/") for s in ROOTFS_SKIP):
                continue
            path = os.path.join(directory, name) if name else directory
            info = tar.gettarinfo(path, arcname=arc)
            if info.isreg():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            elif info.isdir():
                if arc in open_dirs:
                    info.mode |= 0o755
                added.add(arc)
                tar.addfile(info)
            elif info.issym() or info.islnk() or info.isfifo():
                tar.addfile(info)
    return added


def write_base_tar(tar: tarfile.TarFile, fs: str, base: Base) -> str:
    """The whole base into `tar`; returns the venv's path in it."""
    venv = venv_dir(base)
    home = _python_home(venv)
    open_dirs = set(_parents(home)) | set(_parents(venv))
    added = _add_rootfs(tar, fs, open_dirs)
    for arc in sorted(open_dirs - added):
        info = tarfile.TarInfo(arc)
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    _add_tree(tar, home, home.strip("/"), PYTHON_SKIP_DIRS)
    _add_tree(tar, venv, venv.strip("/"))
    for tree in base.vendor:
        site = _site_packages(venv)
        _add_tree(tar, os.path.join(VENDOR_DIR, tree), f"{site.strip('/')}/{tree}", ("__pycache__",))
    return venv


def tree_bytes(top: str, skip_dirs: Tuple[str, ...] = ()) -> int:
    """The bytes of the regular files under `top` (links not followed), as a tar of it holds."""
    total = 0
    for directory, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        for name in files:
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if not os.path.islink(os.path.join(directory, name)):
                total += st.st_size
    return total


def base_bytes(fs: str, base: Base) -> int:
    """About what the base's tar stream carries: the rootfs, the Python, the venv, vendor trees."""
    venv = venv_dir(base)
    total = tree_bytes(fs) + tree_bytes(_python_home(venv), PYTHON_SKIP_DIRS) + tree_bytes(venv)
    return total + sum(tree_bytes(os.path.join(VENDOR_DIR, tree)) for tree in base.vendor)


def docker_root() -> Optional[str]:
    """The daemon's data root when it is a directory of this machine (a local daemon), else None."""
    try:
        proc = subprocess.run(["docker", "info", "-f", "{{.DockerRootDir}}"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    root = proc.stdout.strip()
    return root if proc.returncode == 0 and root and os.path.isdir(root) else None


class _Progress:
    """A file that counts what goes through it to `sink` and says how far the stream is, at most
    every PROGRESS_EVERY_S: an import of several GB says where it is instead of going silent."""

    def __init__(self, sink, total: int, what: str, out) -> None:
        self.sink, self.total, self.what, self.out = sink, max(total, 1), what, out
        self.sent, self.started = 0, time.monotonic()
        self.said = self.started

    def write(self, data) -> int:
        written = self.sink.write(data)
        self.sent += len(data)
        now = time.monotonic()
        if now - self.said >= PROGRESS_EVERY_S:
            self.said = now
            percent = min(99, 100 * self.sent // self.total)
            self.out.write(
                f"local-bases: {self.what}: {self.sent / GB:.1f} of about {self.total / GB:.1f} GB sent ({percent}%, {now - self.started:.0f}s)\n"
            )
            self.out.flush()
        return written

    def flush(self) -> None:
        self.sink.flush()


def import_base(rootfs: Dict, base: Base, out=sys.stdout) -> str:
    """`docker import` the base unless the daemon has it; returns its tag."""
    tag = tag_of(rootfs, base)
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        out.write(f"local-bases: {tag} is there\n")
        stamp_use(tag)
        return tag
    fs = os.path.join(ensure_rootfs(rootfs, out), "fs")
    venv = venv_dir(base)
    total = base_bytes(fs, base)
    data_root = docker_root()
    if data_root:
        need_free(data_root, total + IMPORT_MARGIN, f"importing {tag} ({total / GB:.1f} GB)")
    changes = [
        f"ENV PATH={venv}/bin:{DEFAULT_PATH}",
        f'LABEL {LABEL}="{base.name}" org.opencontainers.image.description="enginex-compat local stand-in: {base.describes}"',
        'CMD ["/bin/bash"]',
    ]
    out.write(f"local-bases: importing {tag} ({base.describes}; about {total / GB:.1f} GB)\n")
    out.flush()
    cmd = ["docker", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    progress = _Progress(proc.stdin, total, f"importing {tag}", out)
    try:
        with proc.stdin, tarfile.open(fileobj=progress, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            write_base_tar(tar, fs, base)
    except BrokenPipeError:  # the daemon refused the stream: its answer says why
        pass
    out.write(f"local-bases: {tag}: {progress.sent / GB:.1f} GB sent; the daemon is storing it\n")
    out.flush()
    stdout, stderr = proc.stdout.read(), proc.stderr.read()
    proc.wait()
    if proc.returncode != 0:
        raise BaseError(
            f"docker import of {tag} failed: {stderr.decode(errors='replace').strip() or stdout.decode(errors='replace').strip()}"
        )
    out.write(f"local-bases: imported {tag} in {time.monotonic() - progress.started:.0f}s\n")
    stamp_use(tag)
    return tag


def ensure(names: Optional[Iterable[str]] = None, out=sys.stdout) -> Dict[str, str]:
    """Every base asked for (all by default), made where missing; {name: tag}."""
    rootfs, bases = load_spec()
    wanted = list(names) if names else list(bases)
    unknown = [n for n in wanted if n not in bases]
    if unknown:
        raise BaseError(f"unknown base {', '.join(unknown)} (envs/bases/bases.toml has: {', '.join(bases)})")
    return {name: import_base(rootfs, bases[name], out) for name in wanted}


def card_bases(cards: Optional[Iterable[str]] = None, out=sys.stdout) -> Dict[str, str]:
    """{card: the tag of the local base it is built on} for the cards asked for (default: every
    card of the matrix), their bases made where missing."""
    manifest = manifest_mod.load()
    rootfs, bases = load_spec()
    names = list(cards) if cards else manifest_mod.card_names(manifest)
    by_card = {name: base_for_card(manifest.cards[manifest_mod.select_card(manifest, name)], bases) for name in names}
    tags = ensure(sorted({b.name for b in by_card.values()}), out)
    return {card: tags[base.name] for card, base in by_card.items()}


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="make the local stand-ins for the vendor base images")
    parser.add_argument("names", nargs="*", help="bases of envs/bases/bases.toml (default: all)")
    parser.add_argument("--list", action="store_true", help="print each card's base and its tag, make nothing")
    parser.add_argument("--if-daemon", action="store_true", help="where no Docker daemon answers, say so and make nothing")
    opts = parser.parse_args(list(argv) if argv is not None else None)
    if opts.if_daemon and not opts.list and not daemon_answers():
        print(f"local-bases: {NO_DAEMON}")
        return 0
    try:
        if opts.list:
            manifest = manifest_mod.load()
            rootfs, bases = load_spec()
            for card in manifest_mod.card_names(manifest):
                base = base_for_card(manifest.cards[card], bases)
                print(f"{card}\t{tag_of(rootfs, base)}\t{base.describes}")
            return 0
        for name, tag in ensure(opts.names).items():
            print(f"{name}\t{tag}")
    except (BaseError, manifest_mod.ManifestError, subprocess.CalledProcessError) as exc:
        print(f"local-bases: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
