"""Fetch the upstream source files listed in envs/upstream/sources.toml into a cache outside the
checkout and link it as .upstream/ (one folder per entry). Checked by sha256; fetched once."""

import hashlib
import os
import sys
import tarfile
import tempfile
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "envs" / "upstream" / "sources.toml"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "enginex-compat" / "upstream"
LINK = ROOT / ".upstream"


def fetch(name: str, entry: dict) -> None:
    dest = CACHE / name
    if all((dest / m).is_file() for m in entry["members"]):
        return
    print(f"fetching {entry['url']}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "src.tar.gz"
        with urllib.request.urlopen(entry["url"], timeout=300) as response, open(archive, "wb") as fh:
            while chunk := response.read(1 << 20):
                fh.write(chunk)
        digest = hashlib.sha256(archive.read_bytes()).hexdigest()
        if digest != entry["sha256"]:
            sys.exit(f"{name}: sha256 {digest} does not match {entry['sha256']}")
        with tarfile.open(archive) as tar:
            for member in entry["members"]:
                data = tar.extractfile(entry["strip"] + member)
                if data is None:
                    sys.exit(f"{name}: {member} is not a file in the archive")
                (dest / member).parent.mkdir(parents=True, exist_ok=True)
                (dest / member).write_bytes(data.read())


def main() -> None:
    with open(SOURCES, "rb") as fh:
        sources = tomllib.load(fh)
    for name, entry in sources.items():
        fetch(name, entry)
    if LINK.is_symlink() or LINK.exists():
        if LINK.resolve() == CACHE.resolve():
            return
        LINK.unlink()
    LINK.symlink_to(CACHE)


if __name__ == "__main__":
    main()
