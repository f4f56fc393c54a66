"""Load and validate the release matrix (build_matrix.toml) and the cards it names
(cards/<card>/card.toml): every error names the file, the section and the key.

Standard library only: the release workflow's matrix job runs this on a bare runner Python.
"""

import os
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from common.codes import BUILD, BUILD_CHECK, BUILD_PATCH

from . import toml_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(ROOT, "build_matrix.toml")
CARDS_DIR = os.path.join(ROOT, "cards")
CARD_FILE = "card.toml"

RELEASE_KEYS = {"registry": str, "image": str, "framework": str, "task_type": str, "api_base": str}
NUMBER = (int, float)
# card.toml: section -> {key: (type or types, required)}
CARD_SCHEMA: Dict[str, Dict[str, Tuple[Any, bool]]] = {
    "image": {"base": (str, True), "python": (str, True)},
    "engine": {
        "vllm": (str, True),
        "transformers": (str, True),
        # The local venv `make profiles` snapshots (the card's engine, or a stand-in for it).
        "snapshot_env": (str, True),
        # An upstream vLLM source tree of the card's era (under .upstream/, `make upstream-src`),
        # asked for the serve flags when snapshot_env has no build of the card's vLLM.
        "vllm_source": (str, False),
    },
    "attention": {"head_sizes": (list, True), "head_size_policy": (str, True)},
    "build": {
        "patches": (list, True),
        # L3: a folder of this card's patches/ whose *.py ops go into the vendor package ops_target.
        "ops_dir": (str, False),
        "ops_target": (str, False),
    },
    "platform": {
        "gpu_type": (str, True),
        # The framework name the platform registers this engine under (default: the release's).
        "framework": (str, False),
    },
    # One accelerator of the card and the node the platform runs it in: what doctor holds the
    # model's weights and KV cache against (common/memory/memory_fit.py). GiB, as the vendors' tools
    # report device memory.
    "device": {
        "memory_gib": (NUMBER, True),
        "per_node": (int, True),
        # What the runtime takes on each device beside torch's allocations by the end of the
        # engine's profiling run (NCCL buffers, library workspaces): vLLM counts it out of the
        # KV space. An estimate per card.
        "non_torch_gib": (NUMBER, False),
        # What capturing CUDA graphs takes after the KV cache is allocated: it comes out of the
        # share gpu_memory_utilization leaves free. An estimate per card.
        "cuda_graph_gib": (NUMBER, False),
    },
}
# The estimates where a card states none.
DEVICE_DEFAULTS = {"non_torch_gib": 0.5, "cuda_graph_gib": 1.0}
# A card may ship several engines: [variants.<name>] holds the sections (any of the above) in
# which that engine differs from the card's default one. Its profile and image are `<card>@<name>`.
VARIANT_SEP = "@"
BUILD_CODES = tuple(c.code for c in BUILD if c.kind in (BUILD_PATCH, BUILD_CHECK))
HEAD_SIZE_POLICIES = ("flex-fallback", "flash-attn-pa-env", "paged-attn-patch")


class ManifestError(ValueError):
    """The manifest or a card file is wrong; the message says where."""


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
    ops_dir: str = ""
    ops_target: str = ""
    # cards/<card>/: the card's own files (card.toml, task_info.env, patches/).
    folder: str = ""
    framework: str = ""
    # The folder's name, and the engine variant ("" for the card's default engine); `name` is
    # `card` or `card@variant`: the profile name `--card` and COMPAT_CARD take.
    card: str = ""
    variant: str = ""
    # [device]: memory_gib, per_node, non_torch_gib, cuda_graph_gib (the profile's `device`).
    device: Tuple[Tuple[str, Any], ...] = ()

    @property
    def image_name(self) -> str:
        """The name in image repositories and file names, where `@` is not allowed."""
        return self.name.replace(VARIANT_SEP, "-")


@dataclass(frozen=True)
class Manifest:
    release: Dict[str, str]
    cards: Dict[str, Card]


def _read_toml(path: str) -> Dict[str, Any]:
    try:
        return toml_files.load(path)
    except FileNotFoundError:
        raise ManifestError(f"{os.path.relpath(path, ROOT)}: missing") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot be read ({exc.strerror})") from None
    except toml_files.TOMLDecodeError as exc:
        raise ManifestError(f"{os.path.relpath(path, ROOT)}: not valid TOML ({exc})") from None


def _type_name(kind: Any) -> str:
    return "number" if kind is NUMBER else kind.__name__


def _check_table(where: str, table: Any, schema: Dict[str, Tuple[Any, bool]]) -> Dict[str, Any]:
    if not isinstance(table, dict):
        raise ManifestError(f"{where}: must be a table")
    for key in table:
        if key not in schema:
            raise ManifestError(f"{where}: unknown key {key!r}")
    for key, (kind, required) in schema.items():
        if key not in table:
            if required:
                raise ManifestError(f"{where}: missing key {key!r}")
            continue
        value = table[key]
        if not isinstance(value, kind) or (kind is str and not value.strip()):
            raise ManifestError(f"{where}: key {key!r} must be a non-empty {_type_name(kind)}")
        if kind in (NUMBER, int) and (isinstance(value, bool) or value <= 0):
            raise ManifestError(f"{where}: key {key!r} must be a positive {_type_name(kind)}")
    return table


def parse_card(name: str, data: Dict[str, Any], folder: str) -> Card:
    """The card's default engine from its card.toml (already parsed); `folder` is where its
    patches live. Its variants: `parse_variants`."""
    where = f"cards/{name}/{CARD_FILE}"
    for section in data:
        if section not in CARD_SCHEMA and section != "variants":
            raise ManifestError(f"{where}: unknown section [{section}]")
    return _parse_sections(name, {k: v for k, v in data.items() if k != "variants"}, folder, where)


def parse_variants(name: str, data: Dict[str, Any], folder: str) -> List[Card]:
    """Each [variants.<v>] of a card.toml: the card's sections with the variant's laid over."""
    where = f"cards/{name}/{CARD_FILE}"
    variants = data.get("variants", {})
    if not isinstance(variants, dict):
        raise ManifestError(f"{where}: [variants] must be a table of [variants.<name>] tables")
    out = []
    for variant, table in sorted(variants.items()):
        vwhere = f"{where} [variants.{variant}]"
        if not variant.replace("-", "").replace("_", "").isalnum() or not isinstance(table, dict):
            raise ManifestError(f"{vwhere}: a variant is a table named in letters, digits, - and _")
        merged = {s: dict(data.get(s, {})) for s in CARD_SCHEMA}
        for section, values in table.items():
            if section not in CARD_SCHEMA or not isinstance(values, dict):
                raise ManifestError(f"{vwhere}: unknown section [{section}]")
            merged[section].update(values)
        card = _parse_sections(f"{name}{VARIANT_SEP}{variant}", merged, folder, vwhere)
        out.append(card)
    return out


def _parse_sections(name: str, data: Dict[str, Any], folder: str, where: str) -> Card:
    tables = {s: _check_table(f"{where} [{s}]", data.get(s), schema) for s, schema in CARD_SCHEMA.items()}
    attention, build = tables["attention"], tables["build"]
    sizes = attention["head_sizes"]
    if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
        raise ManifestError(f"{where} [attention]: key 'head_sizes' must list positive integers")
    if attention["head_size_policy"] not in HEAD_SIZE_POLICIES:
        raise ManifestError(f"{where} [attention]: key 'head_size_policy' must be one of {', '.join(HEAD_SIZE_POLICIES)}")
    unknown = [p for p in build["patches"] if p not in BUILD_CODES]
    if unknown:
        raise ManifestError(
            f"{where} [build]: key 'patches' names {unknown}, which are no build codes "
            f"(known: {', '.join(BUILD_CODES)}; `python3 -m common explain L1`)"
        )
    if "L3" in build["patches"]:
        if not build.get("ops_dir") or not build.get("ops_target"):
            raise ManifestError(f"{where} [build]: L3 needs keys 'ops_dir' (this card's folder of ops) and 'ops_target'")
        ops = os.path.join(folder, build["ops_dir"])
        if not os.path.isdir(ops) or not any(f.endswith(".py") for f in os.listdir(ops)):
            raise ManifestError(f"{where} [build]: ops_dir {build['ops_dir']!r} holds no .py ops")
    engine, image = tables["engine"], tables["image"]
    device = dict(DEVICE_DEFAULTS, **tables["device"])
    card, _, variant = name.partition(VARIANT_SEP)
    return Card(
        name=name,
        card=card,
        variant=variant,
        framework=tables["platform"].get("framework", ""),
        base_image=image["base"],
        python=image["python"],
        gpu_type=tables["platform"]["gpu_type"],
        vllm=engine["vllm"],
        transformers=engine["transformers"],
        snapshot_env=engine["snapshot_env"],
        vllm_source=engine.get("vllm_source", ""),
        head_sizes=tuple(sorted(sizes)),
        head_size_policy=attention["head_size_policy"],
        build_patches=tuple(build["patches"]),
        ops_dir=build.get("ops_dir", ""),
        ops_target=build.get("ops_target", ""),
        folder=folder,
        device=tuple(sorted(device.items())),
    )


def parse(data: Dict[str, Any], cards_dir: str = CARDS_DIR) -> Manifest:
    for key in data:
        if key not in ("release", "matrix"):
            raise ManifestError(f"build_matrix.toml: unknown table {key!r}")
    release = data.get("release")
    _check_table("build_matrix.toml [release]", release, {k: (t, True) for k, t in RELEASE_KEYS.items()})
    if "{card}" not in release["image"]:
        raise ManifestError("build_matrix.toml [release]: key 'image' must contain {card} (one repository per card)")
    matrix = _check_table("build_matrix.toml [matrix]", data.get("matrix"), {"cards": (list, True)})
    names = matrix["cards"]
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ManifestError("build_matrix.toml [matrix]: key 'cards' must list distinct card names")
    cards = {}
    for name in names:
        folder = os.path.join(cards_dir, name)
        if not os.path.isdir(folder):
            raise ManifestError(f"build_matrix.toml [matrix]: card {name!r} has no folder cards/{name}/")
        data = _read_toml(os.path.join(folder, CARD_FILE))
        cards[name] = parse_card(name, data, folder)
        for variant in parse_variants(name, data, folder):
            cards[variant.name] = variant
    if os.path.isdir(cards_dir):
        for folder in sorted(os.listdir(cards_dir)):
            if os.path.isdir(os.path.join(cards_dir, folder)) and folder not in names:
                raise ManifestError(f"cards/{folder}: card folder not listed in build_matrix.toml [matrix] cards")
    return Manifest(release=dict(release), cards=cards)


def load(path: str = MANIFEST, cards_dir: str = CARDS_DIR) -> Manifest:
    return parse(_read_toml(path), cards_dir)


def card_names(manifest: Manifest) -> List[str]:
    return sorted(manifest.cards)


def select_card(manifest: Manifest, name: str) -> str:
    if name not in manifest.cards:
        raise ManifestError(f"unknown card {name!r} (build_matrix.toml has: {', '.join(card_names(manifest))}, or all)")
    return name


def framework(manifest: Manifest, name: str) -> str:
    """The framework the platform registers this card's engine under."""
    return manifest.cards[name].framework or manifest.release["framework"]


def image_ref(manifest: Manifest, card: str, version: str) -> str:
    """registry/repository:tag of a card's image for a release version (a v* tag, or "dev");
    a variant `nv-a100@next` has the repository of `nv-a100-next`. COMPAT_RELEASE_REGISTRY, where
    set, stands for `[release] registry` (a staging mirror, or the tests' registry on 127.0.0.1)."""
    name = manifest.cards[card].image_name if card in manifest.cards else card
    registry = os.environ.get("COMPAT_RELEASE_REGISTRY") or manifest.release["registry"]
    repository = manifest.release["image"].format(registry=registry, card=name)
    return f"{repository}:{version}"


# Images built on the local stand-ins of the vendor bases (make images, the image tier, release-check
# --local-bases) are named apart from the release's: they never overwrite a `make build` image on
# the same daemon, and no push can publish one (`.invalid` never resolves: RFC 6761).
STANDIN_REGISTRY = "standin.invalid/enginex-compat"


def standin_ref(manifest: Manifest, card: str, version: str) -> str:
    """The name of a card's image built on a local stand-in base: the release's repository under
    STANDIN_REGISTRY, whatever COMPAT_RELEASE_REGISTRY says."""
    name = manifest.cards[card].image_name if card in manifest.cards else card
    return manifest.release["image"].format(registry=STANDIN_REGISTRY, card=name) + f":{version}"


def is_standin(image_ref: str) -> bool:
    return image_ref.startswith(STANDIN_REGISTRY + "/")
