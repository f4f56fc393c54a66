"""Generate common/profiles/<card>.json from the manifest and a snapshot of the card's engine.

usage: python -m compat_build.profiles [--check]
--check exits 1 when a committed profile differs from what the manifest and snapshots give.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict

from . import manifest as manifest_mod
from .image_steps.bake_profile import profile_json, render

PROFILE_DIR = os.path.join(manifest_mod.ROOT, "common", "profiles")
SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshot_engine.py")


def take_snapshot(python: str, vllm_source: str = "") -> Dict[str, Any]:
    """Run snapshot_engine.py under `python` (an engine's interpreter) and return its JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "snapshot.json")
        extra = [os.path.join(manifest_mod.ROOT, vllm_source)] if vllm_source else []
        subprocess.run([python, SNAPSHOT, out, *extra], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out, encoding="utf-8") as fh:
            return json.load(fh)


def card_json(card: manifest_mod.Card) -> Dict[str, Any]:
    """The manifest entry as the image build step reads it (card.json in the build context)."""
    return {
        "name": card.name,
        "vllm": card.vllm,
        "transformers": card.transformers,
        "head_sizes": list(card.head_sizes),
        "head_size_policy": card.head_size_policy,
    }


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    opts = parser.parse_args(argv)
    manifest = manifest_mod.load()
    stale = []
    snapshots: Dict[str, Dict[str, Any]] = {}
    for name, card in sorted(manifest.cards.items()):
        python = os.path.join(manifest_mod.ROOT, card.snapshot_env, "bin", "python")
        key = f"{python}|{card.vllm_source}"
        if key not in snapshots:
            snapshots[key] = take_snapshot(python, card.vllm_source)
        snap = snapshots[key]
        if snap["transformers_version"] != card.transformers:
            print(
                f"{name}: {card.snapshot_env} has transformers {snap['transformers_version']}, manifest says {card.transformers}",
                file=sys.stderr,
            )
            return 1
        data = profile_json(card_json(card), snap)
        # Where this checkout keeps the engine the profile was taken from: doctor verifies with
        # it when no COMPAT_ENGINE_PYTHON* names one (an image's baked profile has no such entry).
        data["snapshot_env"] = card.snapshot_env
        text = render(data)
        path = os.path.join(PROFILE_DIR, f"{name}.json")
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current != text:
            stale.append(name)
            if not opts.check:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
        print(f"{name}: {'stale' if opts.check and current != text else 'ok'} ({path})")
    return 1 if opts.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
