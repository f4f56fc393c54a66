"""The ledger of the plugin's engine patches (common/vllm_plugin/compat_patches/__init__.py): every
patch module is in it, with what it patches, why, on which engines and until when; and each
module installs through one `install(log)` that says whether it changed the engine."""

import importlib
import inspect
from pathlib import Path

from common.vllm_plugin import compat_patches

PACKAGE = Path(compat_patches.__file__).parent


def test_every_patch_module_has_its_ledger_entry_and_nothing_else_is_in_it():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert sorted(entry.module for entry in compat_patches.LEDGER) == modules
    for entry in compat_patches.LEDGER:
        assert all(len(text) > 20 for text in (entry.patches, entry.why, entry.engines, entry.until)), entry.module


def test_each_patch_installs_through_one_install_of_the_log():
    for entry in compat_patches.LEDGER:
        module = importlib.import_module(f"common.vllm_plugin.compat_patches.{entry.module}")
        assert list(inspect.signature(module.install).parameters) == ["log"], entry.module
