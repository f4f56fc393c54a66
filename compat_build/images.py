"""Every image of the matrix built on the local bases: `python -m compat_build.images [CARD...]`.

What `make images` (and the image tests) run on a machine without the vendor registries: the
local stand-in of each card's base (compat_build.local_bases, made where missing), then each card
built on it by the same code path as `make build` and the release workflow
(compat_build.build.build_card), tagged as `make build` tags it (version `dev` unless --version).
Prints one `CARD<TAB>TAG<TAB>IMAGE-ID<TAB>BASE` line per image on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from typing import Dict, Iterable, List, Optional, TextIO

from . import local_bases
from . import manifest as manifest_mod
from .build import BuildFailed, build_card, docker_client


def revision() -> str:
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=manifest_mod.ROOT, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


def build_all(cards: Optional[Iterable[str]] = None, version: str = "dev", log: TextIO = sys.stderr) -> Dict[str, Dict[str, str]]:
    """{card: {"tag", "id", "base"}} for each card asked for (all by default)."""
    manifest = manifest_mod.load()
    names: List[str] = [manifest_mod.select_card(manifest, c) for c in cards] if cards else manifest_mod.card_names(manifest)
    client = docker_client()
    bases = local_bases.card_bases(names, out=log)
    built = {}
    for name in names:
        tag = manifest_mod.image_ref(manifest, name, version)
        log.write(f"images: building {name} -> {tag} on {bases[name]}\n")
        log.flush()
        image_id = build_card(
            client, manifest.cards[name], tag, {"VERSION": version, "REVISION": revision(), "BASE_IMAGE": bases[name]}, out=log
        )
        built[name] = {"tag": tag, "id": image_id, "base": bases[name]}
    return built


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="build every card image on the local stand-in bases")
    parser.add_argument("cards", nargs="*", help="cards of the matrix (default: all)")
    parser.add_argument("--version", default="dev")
    parser.add_argument("--if-daemon", action="store_true", help="where no Docker daemon answers, say so and build nothing")
    opts = parser.parse_args(list(argv) if argv is not None else None)
    if opts.if_daemon and not local_bases.daemon_answers():
        print(f"images: {local_bases.NO_DAEMON}")
        return 0
    try:
        for card, image in build_all(opts.cards, opts.version).items():
            print(f"{card}\t{image['tag']}\t{image['id']}\t{image['base']}")
    except (BuildFailed, local_bases.BaseError, manifest_mod.ManifestError) as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
