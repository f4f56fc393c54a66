"""The shared library of build-time patches: one module per code, applied inside the image by
compat_build/image_steps/apply_patches.py. A card names the codes it needs in its card.toml
([build] patches); what each code is for is in the registry (`python3 -m common explain L1`).

Each module gives MODULE (found through the image's Python) and `transform(text) -> text` for the
shared helper common.engine.patching. A patch only one card needs lives in that card's patches/ folder.
"""

from __future__ import annotations

from types import ModuleType
from typing import Dict

from . import l1_special_tokens_list, l2_triton_head_size_check

PATCHES: Dict[str, ModuleType] = {
    "L1": l1_special_tokens_list,
    "L2": l2_triton_head_size_check,
}
