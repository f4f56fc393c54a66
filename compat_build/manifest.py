"""Load and validate build_matrix.toml: every error names the card and the key."""

import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - build tooling runs on 3.11 here, 3.10 is allowed
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(ROOT, "build_matrix.toml")
CARDS_DIR = os.path.join(ROOT, "cards")

RELEASE_KEYS = {"registry": str, "image": str, "framework": str, "task_type": str, "api_base": str}
CARD_KEYS = {
    "base_image": str,
    "python": str,
    "gpu_type": str,
    "vllm": str,
    "transformers": str,
    "snapshot_env": str,
    "head_sizes": list,
    "head_size_policy": str,
    "build_patches": list,
}
# Optional per card, with their defaults.
CARD_OPTIONAL = {
    # An upstream vLLM source tree (under .upstream/, `make upstream-src`) of the card's era, asked
    # for its serve flags when snapshot_env has no build of the card's vLLM fork.
    "vllm_source": "",
    # L3: the vendor package that receives cards/<card>/patched_ops (e.g. ixformer.functions).
    "patched_ops_target": "",
}
# L1/L2: compat_build/image_steps/library_patches.py; L3: the card's patched_ops/ installer.
BUILD_PATCHES = ("L1", "L2", "L3")
HEAD_SIZE_POLICIES = ("flex-fallback", "flash-attn-pa-env", "paged-attn-patch")


class ManifestError(ValueError):
    """The manifest is wrong; the message says where."""


@dataclass(frozen=True)
class Card:
    name: str
    base_image: str
    python: str
    gpu_type: str
    vllm: str
    transformers: str
    snapshot_env: str
    head_sizes: Tuple[int, ...]
    head_size_policy: str
    build_patches: Tuple[str, ...]
    vllm_source: str = ""
    patched_ops_target: str = ""


@dataclass(frozen=True)
class Manifest:
    release: Dict[str, str]
    cards: Dict[str, Card]


def _check_keys(where: str, table: Any, schema: Dict[str, type], optional: Optional[Dict[str, Any]] = None) -> None:
    if not isinstance(table, dict):
        raise ManifestError(f"{where}: must be a table")
    for key in table:
        if optional and key in optional:
            if not isinstance(table[key], type(optional[key])):
                raise ManifestError(f"{where}: key {key!r} must be a {type(optional[key]).__name__}")
        elif key not in schema:
            raise ManifestError(f"{where}: unknown key {key!r}")
    for key, kind in schema.items():
        if key not in table:
            raise ManifestError(f"{where}: missing key {key!r}")
        if not isinstance(table[key], kind) or (kind is str and not table[key].strip()):
            raise ManifestError(f"{where}: key {key!r} must be a non-empty {kind.__name__}")


def parse(data: Dict[str, Any], cards_dir: str = CARDS_DIR) -> Manifest:
    for key in data:
        if key not in ("release", "cards"):
            raise ManifestError(f"build_matrix.toml: unknown table {key!r}")
    _check_keys("[release]", data.get("release"), RELEASE_KEYS)
    raw_cards = data.get("cards")
    if not isinstance(raw_cards, dict) or not raw_cards:
        raise ManifestError("build_matrix.toml: no [cards.*] tables")
    cards = {}
    for name, table in raw_cards.items():
        where = f"[cards.{name}]"
        _check_keys(where, table, CARD_KEYS, CARD_OPTIONAL)
        sizes = table["head_sizes"]
        if not sizes or not all(isinstance(s, int) and s > 0 for s in sizes):
            raise ManifestError(f"{where}: key 'head_sizes' must list positive integers")
        unknown = [p for p in table["build_patches"] if p not in BUILD_PATCHES]
        if unknown:
            raise ManifestError(f"{where}: key 'build_patches' names unknown patches {unknown} (known: {', '.join(BUILD_PATCHES)})")
        if "L3" in table["build_patches"] and not table.get("patched_ops_target"):
            raise ManifestError(f"{where}: L3 needs key 'patched_ops_target' (the vendor package receiving patched_ops/)")
        if table["head_size_policy"] not in HEAD_SIZE_POLICIES:
            raise ManifestError(f"{where}: key 'head_size_policy' must be one of {', '.join(HEAD_SIZE_POLICIES)}")
        cards[name] = Card(name=name, head_sizes=tuple(sorted(sizes)),
                           build_patches=tuple(table["build_patches"]),
                           **{k: table.get(k, default) for k, default in CARD_OPTIONAL.items()},
                           **{k: table[k] for k in CARD_KEYS if k not in ("head_sizes", "build_patches")})
    if os.path.isdir(cards_dir):
        for folder in sorted(os.listdir(cards_dir)):
            if os.path.isdir(os.path.join(cards_dir, folder)) and folder not in cards:
                raise ManifestError(f"cards/{folder}: card folder without a [cards.{folder}] entry in build_matrix.toml")
    if "{card}" not in data["release"]["image"]:
        raise ManifestError("[release]: key 'image' must contain {card} (one repository per card)")
    return Manifest(release=dict(data["release"]), cards=cards)


def load(path: str = MANIFEST, cards_dir: str = CARDS_DIR) -> Manifest:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path}: not valid TOML ({exc})") from None
    return parse(data, cards_dir)


def card_names(manifest: Manifest) -> List[str]:
    return sorted(manifest.cards)


def select_card(manifest: Manifest, name: str) -> str:
    if name not in manifest.cards:
        raise ManifestError(f"unknown card {name!r} (build_matrix.toml has: {', '.join(card_names(manifest))}, or all)")
    return name


def image_ref(manifest: Manifest, card: str, version: str) -> str:
    """registry/repository:tag of a card's image for a release version (a v* tag, or "dev")."""
    repository = manifest.release["image"].format(registry=manifest.release["registry"], card=card)
    return f"{repository}:{version}"
