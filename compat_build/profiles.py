"""Generate common/engine/profiles/<card>.json from the manifest and a snapshot of the card's engine,
and common/engine/engine_venvs.json: where this checkout keeps each card's engine venv (its
snapshot_env), which doctor verifies with when no COMPAT_ENGINE_PYTHON* names an engine.

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

PROFILE_DIR = os.path.join(manifest_mod.ROOT, "common", "engine", "profiles")
ENGINE_VENVS = os.path.join(manifest_mod.ROOT, "common", "engine", "engine_venvs.json")
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
        "device": dict(card.device),
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
        path = os.path.join(PROFILE_DIR, f"{name}.json")
        if _sync(path, render(profile_json(card_json(card), snap)), opts.check):
            stale.append(name)
    # The profiles are the engines' own (an image bakes the same from its packages); where a
    # checkout keeps them is the checkout's, so it lives apart.
    venvs = {name: card.snapshot_env for name, card in sorted(manifest.cards.items())}
    if _sync(ENGINE_VENVS, render(venvs), opts.check):
        stale.append(ENGINE_VENVS)
    return 1 if opts.check and stale else 0


def _sync(path: str, text: str, check: bool) -> bool:
    """Write `text` to `path` (only compare, with `check`); True when they differed."""
    current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
    if current != text and not check:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    print(f"{os.path.basename(path)}: {'stale' if check and current != text else 'ok'} ({path})")
    return current != text


if __name__ == "__main__":
    sys.exit(main())
