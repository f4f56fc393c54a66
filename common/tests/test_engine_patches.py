"""The plugin's engine patches (common/vllm_plugin/compat_patches/): each module installs through
one `install(log)` that says whether it changed the engine (their ledger entries are held by
tests/unit/test_patch_ledger.py)."""

import importlib
import inspect
from pathlib import Path

from common.vllm_plugin import compat_patches

MODULES = sorted(p.stem for p in Path(compat_patches.__file__).parent.glob("*.py") if p.stem != "__init__")


def test_each_patch_installs_through_one_install_of_the_log():
    assert MODULES
    for name in MODULES:
        module = importlib.import_module(f"common.vllm_plugin.compat_patches.{name}")
        assert list(inspect.signature(module.install).parameters) == ["log"], name
