"""One ledger of every patch (compat_build/patch_ledger.toml): the plugin's patches and wraps, the
classes it registers, the start-time source edits, the build-time patches, the shims and the test
venvs' harness patches. Every patch the tree holds is in it, and a patch added anywhere without
an entry is named."""

import shutil
from pathlib import Path

import pytest

from compat_build import patch_ledger

ENTRIES = patch_ledger.load()
# The folders where patches live, copied to make a tree to add patches to.
HOMES = ("common/vllm_plugin", "common/rules", "common/shims", "common/engine", "common/start", "compat_build", "cards", "envs")


def test_every_patch_in_the_tree_is_in_the_ledger():
    assert patch_ledger.unlisted(ENTRIES) == []
    assert {e.kind for e in ENTRIES} == set(patch_ledger.KINDS)
    assert len({e.name for e in ENTRIES}) == len(ENTRIES)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for home in HOMES:
        shutil.copytree(patch_ledger.ROOT / home, tmp_path / home, ignore=shutil.ignore_patterns("__pycache__"))
    assert patch_ledger.unlisted(ENTRIES, tmp_path) == []
    return tmp_path


NEW_PATCHES = {
    # a plugin patch module
    "common/vllm_plugin/compat_patches/cpu_sampler.py": ("def install(log):\n    return False\n", "plugin-patch"),
    # the plugin wrapping another engine method
    "common/vllm_plugin/compat_logits.py": (
        "import vllm\n\ndef register():\n    setattr(vllm.LLMEngine, 'step', lambda self: None)\n",
        "plugin-wrap",
    ),
    # a class registered with the engine's registry
    "common/vllm_plugin/compat_more.py": (
        "from vllm import ModelRegistry\n\ndef register():\n    ModelRegistry.register_model('X', object)\n",
        "registration",
    ),
    # a rule that edits the engine's source at start
    "common/rules/h9_kernels.py": ("def check(repair):\n    repair.engine_patch = ('vllm.x', str)\n", "start-edit"),
    # a build-time patch, shared and a card's own
    "compat_build/patches/l9_anything.py": ("MODULE = 'transformers'\n", "build-patch"),
    "cards/hygon-k100/patches/ops/fused.py": ("x = 1\n", "build-patch"),
    # a shim, and an edit of a test venv's engine
    "common/shims/vendorlib/__init__.py": ("", "shim"),
    "envs/engine/cpu_sampler.py": ("print('edits the venv')\n", "harness"),
}


def test_a_patch_added_without_an_entry_is_named(tree: Path):
    for path, (text, _) in NEW_PATCHES.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_text(text)
    assert patch_ledger.unlisted(ENTRIES, tree) == sorted(f"{path} ({kind})" for path, (_, kind) in NEW_PATCHES.items())


def test_an_entry_whose_file_is_gone_is_named(tree: Path):
    (tree / "envs/engine/cpu_windows.py").unlink()
    assert patch_ledger.unlisted(ENTRIES, tree) == ["envs/engine/cpu_windows.py (named by 'cpu_windows (0.11 venv)', not in the tree)"]


def test_an_entry_without_its_why_is_refused(tmp_path: Path):
    text = patch_ledger.LEDGER_FILE.read_text().replace("why = \"the CPU build's FusedMoE", "whY = \"the CPU build's FusedMoE", 1)
    (tmp_path / "ledger.toml").write_text(text)
    with pytest.raises(ValueError, match="'cpu_moe'.*missing \\['why'\\]"):
        patch_ledger.load(tmp_path / "ledger.toml")
