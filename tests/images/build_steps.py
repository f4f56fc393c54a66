"""What a card image's build steps left in it, read inside the image and compared with its base
image's own files: the shared checks the per-card folders use."""

from __future__ import annotations

from typing import Dict

import pytest
from docker.errors import ImageNotFound

from common.engine.patching import BACKUP_SUFFIX
from compat_build.patches.l1_special_tokens_list import MARKER as L1_MARKER
from tests.images.conftest import IMAGE_HOME, in_image

STEPS_ENV = {"PYTHONPATH": IMAGE_HOME}
L1_MODULE = "transformers.tokenization_utils_base"
MISSING = "missing"
DIGEST = (
    "import hashlib, sys\n"
    "try:\n    print(hashlib.sha256(open(sys.argv[1], 'rb').read()).hexdigest())\n"
    f"except FileNotFoundError:\n    print({MISSING!r})\n"
)


def module_file(containers, tag: str, dotted: str) -> str:
    """The file of a module of the image's Python, found without importing it."""
    code = f"import importlib.util; print(importlib.util.find_spec({dotted!r}).origin)"
    return in_image(containers, tag, "module-file", "python3", "-c", code).strip()


def file_digest(containers, tag: str, path: str) -> str:
    """sha256 of a file inside the image, or MISSING."""
    return in_image(containers, tag, "digest", "python3", "-c", DIGEST, path).strip()


def base_of(containers, image: Dict[str, str]) -> str:
    """The base the image was built on (its base-name label), where this daemon has it."""
    base = image["base"]
    try:
        containers.client.images.get(base)
    except ImageNotFound:
        pytest.skip(f"{image['tag']}'s base {base or '(no label)'} is not on this daemon: nothing to compare its files with")
    return base


def l1_state(containers, image: Dict[str, str]) -> Dict[str, object]:
    """L1's file in the image against the same file in its base: whether the image's copy carries
    the patch, is the base's own, and whether a backup beside it holds the base's original."""
    tag = image["tag"]
    path = module_file(containers, tag, L1_MODULE)
    original = file_digest(containers, base_of(containers, image), path)
    assert original != MISSING, f"the base has no {path}"
    return {
        "marked": L1_MARKER in in_image(containers, tag, "l1-file", "cat", path),
        "as_in_base": file_digest(containers, tag, path) == original,
        "backup": {MISSING: "none", original: "the base's original"}.get(file_digest(containers, tag, path + BACKUP_SUFFIX), "differs"),
    }


L1_APPLIED = {"marked": True, "as_in_base": False, "backup": "the base's original"}
L1_NOT_APPLIED = {"marked": False, "as_in_base": True, "backup": "none"}


def apply_again(containers, tag: str, *codes: str) -> str:
    """The image's own patch step run once more: every patch says `unchanged`, every check passes."""
    return in_image(containers, tag, "apply-again", "python3", "-m", "compat_build.image_steps.apply_patches", *codes, env=STEPS_ENV)
