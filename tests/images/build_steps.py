"""What a card image's build steps left in it, read inside the image: the shared checks the
per-card folders use."""

from __future__ import annotations

from common.patching import BACKUP_SUFFIX
from compat_build.patches.l1_special_tokens_list import MARKER as L1_MARKER
from tests.images.conftest import IMAGE_HOME, in_image

STEPS_ENV = {"PYTHONPATH": IMAGE_HOME}


def module_file(containers, tag: str, dotted: str) -> str:
    """The file of a module of the image's Python, found without importing it."""
    code = f"import importlib.util; print(importlib.util.find_spec({dotted!r}).origin)"
    return in_image(containers, tag, "module-file", "python3", "-c", code).strip()


def l1_applied(containers, tag: str) -> bool:
    """The image's transformers carries L1, with the original kept beside it."""
    path = module_file(containers, tag, "transformers.tokenization_utils_base")
    text = in_image(containers, tag, "l1-file", "cat", path)
    backup = in_image(containers, tag, "l1-backup", "sh", "-c", f"test -f {path}{BACKUP_SUFFIX} && echo kept || echo none").strip()
    return L1_MARKER in text and backup == "kept"


def apply_again(containers, tag: str, *codes: str) -> str:
    """The image's own patch step run once more: every patch says `unchanged`, every check passes."""
    return in_image(containers, tag, "apply-again", "python3", "-m", "compat_build.image_steps.apply_patches", *codes, env=STEPS_ENV)
