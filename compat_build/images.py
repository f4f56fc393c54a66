"""Every image of the matrix built on the local bases: `python -m compat_build.images [CARD...]`
(`--on-base BASE`: the cards built on that base, as soon as it is made: `make images` builds each
base's cards while the other bases are still being made).

What `make images` (and the image tests) run on a machine without the vendor registries: the
local stand-in of each card's base (compat_build.local_bases, made where missing), then each card
built on it by the same code path as `make build` and the release workflow
(compat_build.build.build_card), labelled with the checkout's commit as `make build` labels it.
A stand-in is named apart from the release's images (manifest.standin_ref:
`standin.invalid/enginex-compat/vllm-compat-CARD:dev`): it never overwrites a `make build` image on
the same daemon, and no push can publish it.
Prints one `CARD<TAB>TAG<TAB>IMAGE-ID<TAB>BASE` line per image on stdout; progress goes to stderr.
Every card asked for is built even when one fails; the failures are summed up last (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from typing import Dict, Iterable, List, Optional, TextIO

from . import local_bases
from . import manifest as manifest_mod
from .build import BuildFailed, build_card, docker_client, revision


class ImagesFailed(BuildFailed):
    """Some cards did not build: `built` holds the ones that did, `failures` card -> why."""

    def __init__(self, built: Dict[str, Dict[str, str]], failures: Dict[str, str]) -> None:
        self.built, self.failures = built, failures
        lines = [f"{card}: {why}" for card, why in failures.items()]
        super().__init__(f"{len(failures)} of {len(failures) + len(built)} images failed:\n" + "\n".join(lines))


def build_all(cards: Optional[Iterable[str]] = None, version: str = "dev", log: TextIO = sys.stderr) -> Dict[str, Dict[str, str]]:
    """{card: {"tag", "id", "base"}} for each card asked for (all by default). Raises ImagesFailed
    (a BuildFailed) after trying every card when any failed."""
    manifest = manifest_mod.load()
    names: List[str] = [manifest_mod.select_card(manifest, c) for c in cards] if cards else manifest_mod.card_names(manifest)
    client = docker_client()
    bases = local_bases.card_bases(names, out=log)
    commit = revision()
    built: Dict[str, Dict[str, str]] = {}
    failures: Dict[str, str] = {}
    for name in names:
        tag = manifest_mod.standin_ref(manifest, name, version)
        log.write(f"images: building {name} -> {tag} on {bases[name]}\n")
        log.flush()
        try:
            image_id = build_card(
                client, manifest.cards[name], tag, {"VERSION": version, "REVISION": commit, "BASE_IMAGE": bases[name]}, out=log
            )
        except BuildFailed as exc:
            log.write(f"images: {exc}\n")
            failures[name] = str(exc)
            continue
        built[name] = {"tag": tag, "id": image_id, "base": bases[name]}
    if failures:
        raise ImagesFailed(built, failures)
    return built


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="build every card image on the local stand-in bases")
    parser.add_argument("cards", nargs="*", help="cards of the matrix (default: all)")
    parser.add_argument("--on-base", metavar="BASE", help="the cards built on this base of envs/bases/bases.toml (instead of CARD...)")
    parser.add_argument("--version", default="dev")
    parser.add_argument("--if-daemon", action="store_true", help="where no Docker daemon answers, say so and build nothing")
    opts = parser.parse_args(list(argv) if argv is not None else None)
    if opts.if_daemon and not local_bases.daemon_answers():
        print(f"images: {local_bases.NO_DAEMON}")
        return 0
    try:
        cards = local_bases.cards_on(opts.on_base) if opts.on_base else opts.cards
        built = build_all(cards, opts.version) if cards or not opts.on_base else {}
        failures: Dict[str, str] = {}
    except ImagesFailed as exc:
        built, failures = exc.built, exc.failures
    except (BuildFailed, local_bases.BaseError, manifest_mod.ManifestError) as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    for card, image in built.items():
        print(f"{card}\t{image['tag']}\t{image['id']}\t{image['base']}")
    if failures:
        print(f"images: {len(built)} of {len(built) + len(failures)} built; failed:", file=sys.stderr)
        for card, why in failures.items():
            print(f"  FAIL {card}: {why.splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
