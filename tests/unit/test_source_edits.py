"""envs/source_edits.py, the applier of every engine venv's harness patches: all edits or none, an
edit made once, and a venv copied with hard links left intact (make-venv.sh's cache is deduplicated
so on machines short of disk)."""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "envs"))
from source_edits import apply_edits  # noqa: E402

EDITS = [("a.py", "x = 1\n", "x = 2\n"), ("b.py", "y = 1\n", "y = 3\n")]


def package(tmp_path: Path) -> Path:
    root = tmp_path / "vllm"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    (root / "b.py").write_text("y = 1\n")
    return root


def test_each_edit_is_made_once(tmp_path):
    root = package(tmp_path)
    assert apply_edits(root, EDITS, "0.0") == ["a.py edited", "b.py edited"]
    assert apply_edits(root, EDITS, "0.0") == ["a.py already edited", "b.py already edited"]
    assert (root / "a.py").read_text() == "x = 2\n" and (root / "b.py").read_text() == "y = 3\n"


def test_a_missing_anchor_writes_no_file_and_names_the_engine(tmp_path):
    root = package(tmp_path)
    (root / "b.py").write_text("y = 9\n")
    with pytest.raises(ValueError, match=r"b\.py.*not the vLLM 0\.11\.0"):
        apply_edits(root, EDITS, "0.11.0")
    assert (root / "a.py").read_text() == "x = 1\n"


def test_a_hard_linked_copy_keeps_its_original(tmp_path):
    root = package(tmp_path)
    os.chmod(root / "a.py", 0o640)
    twin = tmp_path / "twin.py"
    os.link(root / "a.py", twin)
    apply_edits(root, EDITS, "0.0")
    assert twin.read_text() == "x = 1\n" and (root / "a.py").read_text() == "x = 2\n"
    assert (root / "a.py").stat().st_mode & 0o777 == 0o640
