"""Fetch the upstream source files listed in envs/upstream/sources.toml into a cache outside the
checkout and link it as .upstream/ (one folder per entry). Checked by sha256; fetched once.

The verified archive itself is kept too (ARCHIVES, beside the extracted files), because a build
needs the whole source tree: `fetch_upstream.py --archive NAME` makes sure the archive of entry
NAME is there, checked against its sha256, and prints its path (envs/engine055/install.sh builds
vLLM 0.5.5 from it). sources.toml stays the one place that knows the url and sha256.

Runs on Python 3.10 as well (the BI-100 engine venv calls it): tomllib, else pip's own tomli.
"""

import argparse
import hashlib
import os
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: every venv has pip, and pip vendors the same parser
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "envs" / "upstream" / "sources.toml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "enginex-compat" / "upstream"
ARCHIVES = CACHE.parent / "upstream-archives"
LINK = ROOT / ".upstream"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def archive(name: str, entry: dict) -> Path:
    """The entry's archive in ARCHIVES, downloaded once and checked against its sha256 on every call
    (a damaged or replaced file is fetched again, a wrong download is never kept)."""
    path = ARCHIVES / entry["url"].rsplit("/", 1)[1]
    if path.is_file() and sha256_of(path) == entry["sha256"]:
        return path
    print(f"fetching {entry['url']}", file=sys.stderr)
    ARCHIVES.mkdir(parents=True, exist_ok=True)
    # Downloaded next to its final place and renamed once verified: concurrent runs never see half a file.
    with tempfile.NamedTemporaryFile(dir=ARCHIVES, prefix=".part-", delete=False) as fh:
        part = Path(fh.name)
        try:
            with urllib.request.urlopen(entry["url"], timeout=300) as response:
                while chunk := response.read(1 << 20):
                    fh.write(chunk)
        except BaseException:
            part.unlink()
            raise
    digest = sha256_of(part)
    if digest != entry["sha256"]:
        part.unlink()
        sys.exit(f"{name}: sha256 {digest} does not match {entry['sha256']}")
    part.chmod(0o644)
    part.replace(path)
    return path


def fetch(name: str, entry: dict) -> None:
    dest = CACHE / name
    if all((dest / m).is_file() for m in entry["members"]):
        return
    with tarfile.open(archive(name, entry)) as tar:
        for member in entry["members"]:
            data = tar.extractfile(entry["strip"] + member)
            if data is None:
                sys.exit(f"{name}: {member} is not a file in the archive")
            (dest / member).parent.mkdir(parents=True, exist_ok=True)
            (dest / member).write_bytes(data.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archive", metavar="NAME", help="only make sure entry NAME's verified archive is cached and print its path")
    opts = parser.parse_args()
    with open(SOURCES, "rb") as fh:
        sources = tomllib.load(fh)
    if opts.archive:
        if opts.archive not in sources:
            sys.exit(f"no entry {opts.archive!r} in {SOURCES.name}")
        print(archive(opts.archive, sources[opts.archive]))
        return
    for name, entry in sources.items():
        fetch(name, entry)
    if LINK.is_symlink() or LINK.exists():
        if LINK.resolve() == CACHE.resolve():
            return
        LINK.unlink()
    LINK.symlink_to(CACHE)


if __name__ == "__main__":
    main()
