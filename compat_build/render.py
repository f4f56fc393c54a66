"""Render each card's complete build context into build/<card>/ from build_matrix.toml.

usage: python -m compat_build.render [CARD|all] [--out DIR]

build/<card>/ holds: Dockerfile (compat_build/templates/Dockerfile.j2, one template for every
card), card.json (the card's entry for the profile step), entrypoint.sh, steps/ (the patching
helper, the code registry, the shared patch library and the image steps), runtime/common/ (the
runtime package without tests or the repo's profiles: the image bakes its own), selftest/models/
(the fixture models `docker run IMAGE selftest` starts), and patches/ (the card folder's own
patches, e.g. BI-100's L3 ops) when the card has any.
Rendering is deterministic: the same manifest and sources give the same bytes, file modes included.
"""

import argparse
import json
import os
import shutil
import sys
from typing import Iterable, List, Optional

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from . import manifest as manifest_mod
from .patches import PATCHES
from .profiles import card_json

ROOT = manifest_mod.ROOT
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
HOME = "/opt/enginex-compat"
BUILD_DIR_DEFAULT = os.path.join(ROOT, "build")

# (source under ROOT, destination under the context): what the build steps need in the image.
STEP_FILES = (
    ("common/__init__.py", "steps/common/__init__.py"),
    ("common/engine/__init__.py", "steps/common/engine/__init__.py"),
    ("common/engine/patching.py", "steps/common/engine/patching.py"),
    ("common/codes.py", "steps/common/codes.py"),
    ("common/code_kinds.py", "steps/common/code_kinds.py"),
    ("common/engine_checks/__init__.py", "steps/common/engine_checks/__init__.py"),
    ("common/engine_checks/layer_api.py", "steps/common/engine_checks/layer_api.py"),
    ("compat_build/__init__.py", "steps/compat_build/__init__.py"),
    ("compat_build/snapshot_engine.py", "steps/compat_build/snapshot_engine.py"),
    ("compat_build/image_steps", "steps/compat_build/image_steps"),
    ("compat_build/patches", "steps/compat_build/patches"),
)
# The committed fixture models (metadata only) the image's self-test starts (common/build_checks/selftest.py):
# one saved by transformers 5, and the clean ones (saved by 4.57, or by 4.55 for an engine that
# reads only `torch_dtype`: the self-test picks by the baked profile). Bundled as selftest/models/<name>/.
SELFTEST_MODELS = ("v5-generic", "457-generic", "455-generic")
FIXTURE_MODELS = os.path.join("harness", "fixtures", "models")
# Never shipped in the runtime package.
RUNTIME_EXCLUDE = ("tests", "__pycache__", "*.pyc")


def _runtime_ignore(directory: str, names: List[str]) -> List[str]:
    ignored = set(shutil.ignore_patterns(*RUNTIME_EXCLUDE)(directory, names))
    if os.path.basename(directory) == "profiles":
        ignored |= {n for n in names if n.endswith(".json") or n == "IMAGE_CARD"}
    return sorted(ignored)


def _steps_ignore(directory: str, names: List[str]) -> List[str]:
    return sorted(shutil.ignore_patterns("__pycache__", "*.pyc")(directory, names))


def _copy(src: str, dst: str, ignore=_steps_ignore) -> None:
    if os.path.isdir(src):
        shutil.copytree(src, dst, ignore=ignore, symlinks=False)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)


def _is_script(path: str) -> bool:
    """A shell script, or a file the image execs by its #! line (the self-test's vLLM recorder)."""
    if path.endswith(".sh"):
        return True
    with open(path, "rb") as fh:
        return fh.read(2) == b"#!"


def _normalize_modes(root: str) -> None:
    """Same bytes and modes whatever the checkout's umask: files 0644, scripts and dirs 0755."""
    for base, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(base, d), 0o755)
        for f in files:
            path = os.path.join(base, f)
            os.chmod(path, 0o755 if _is_script(path) else 0o644)


def dockerfile(card: manifest_mod.Card) -> str:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    library = [code for code in card.build_patches if code in PATCHES]
    return env.get_template("Dockerfile.j2").render(card=card, home=HOME, library_patches=library)


def render_card(card: manifest_mod.Card, out_dir: str) -> str:
    ctx = os.path.join(out_dir, card.name)
    if os.path.exists(ctx):
        shutil.rmtree(ctx)
    os.makedirs(ctx)
    with open(os.path.join(ctx, "Dockerfile"), "w", encoding="utf-8") as fh:
        fh.write(dockerfile(card))
    with open(os.path.join(ctx, "card.json"), "w", encoding="utf-8") as fh:
        json.dump(card_json(card), fh, indent=1, sort_keys=True)
        fh.write("\n")
    _copy(os.path.join(ROOT, "common", "entrypoint.sh"), os.path.join(ctx, "entrypoint.sh"))
    for src, dst in STEP_FILES:
        _copy(os.path.join(ROOT, src), os.path.join(ctx, dst))
    _copy(os.path.join(ROOT, "common"), os.path.join(ctx, "runtime", "common"), ignore=_runtime_ignore)
    for model in SELFTEST_MODELS:
        _copy(os.path.join(ROOT, FIXTURE_MODELS, model), os.path.join(ctx, "selftest", "models", model))
    card_patches = os.path.join(card.folder, "patches")
    if os.path.isdir(card_patches):
        _copy(card_patches, os.path.join(ctx, "patches"))
    _normalize_modes(ctx)
    return ctx


def select(manifest: manifest_mod.Manifest, which: str) -> List[manifest_mod.Card]:
    if which == "all":
        return [manifest.cards[name] for name in manifest_mod.card_names(manifest)]
    return [manifest.cards[manifest_mod.select_card(manifest, which)]]


def main(argv: Optional[Iterable[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="render card build contexts into build/<card>/")
    parser.add_argument("card", nargs="?", default="all")
    parser.add_argument("--out", default=BUILD_DIR_DEFAULT)
    opts = parser.parse_args(list(argv) if argv is not None else None)
    try:
        cards = select(manifest_mod.load(), opts.card)
    except manifest_mod.ManifestError as exc:
        print(f"render: {exc}", file=sys.stderr)
        return 2
    for card in cards:
        print(f"rendered {os.path.relpath(render_card(card, opts.out), os.getcwd())}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
