"""cards/<card>/task_info.env: the platform metadata the release workflow loads, generated from
build_matrix.toml (the one source of truth).

usage: python -m compat_build.task_info [--check]
--check exits 1 naming each card whose committed file differs from the manifest.
"""

import argparse
import os
import sys
from typing import Optional, Sequence

from . import manifest as manifest_mod

HEADER = "# Generated from build_matrix.toml by `make render`; edit the manifest, not this file.\n"


def task_info(manifest: manifest_mod.Manifest, card: str) -> str:
    values = {
        "FRAMEWORK": manifest.release["framework"],
        "GPU_TYPE": manifest.cards[card].gpu_type,
        "TASK_TYPE": manifest.release["task_type"],
    }
    return HEADER + "".join(f"{key}={value}\n" for key, value in values.items())


def path_for(card: str, cards_dir: str = manifest_mod.CARDS_DIR) -> str:
    return os.path.join(cards_dir, card, "task_info.env")


def stale_cards(manifest: manifest_mod.Manifest, cards_dir: str = manifest_mod.CARDS_DIR) -> list:
    """Cards whose task_info.env is missing or differs from what the manifest gives."""
    stale = []
    for card in manifest_mod.card_names(manifest):
        path = path_for(card, cards_dir)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current != task_info(manifest, card):
            stale.append(card)
    return stale


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="write or check cards/<card>/task_info.env")
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args(argv)
    manifest = manifest_mod.load()
    stale = stale_cards(manifest)
    for card in stale:
        path = path_for(card)
        if opts.check:
            print(f"{os.path.relpath(path, manifest_mod.ROOT)} disagrees with build_matrix.toml; run `make render`",
                  file=sys.stderr)
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(task_info(manifest, card))
        print(f"wrote {os.path.relpath(path, manifest_mod.ROOT)}")
    return 1 if opts.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
