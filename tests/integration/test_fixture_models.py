"""The committed fixture models are exactly what the project's own script makes with the authors'
transformers today: regenerated and compared file by file (`make fixtures` rewrites them)."""

from pathlib import Path

import pytest

from harness.fixtures.committed import COMMITTED, VARIANTS, generate
from harness.fixtures.factory import AUTHOR_PYTHON


@pytest.mark.skipif(not all(p.exists() for p in AUTHOR_PYTHON.values()), reason="needs .venv-author and .venv: run `make author-env venv`")
def test_committed_fixture_models_match_a_fresh_generation(tmp_path):
    fresh = generate(tmp_path / "models")

    def files(root: Path):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    committed, regenerated = files(COMMITTED), files(fresh)
    assert sorted(committed) == sorted(regenerated), "run `make fixtures` and commit harness/fixtures/models"
    for name, data in regenerated.items():
        assert committed[name] == data, f"{name} differs from a fresh generation: run `make fixtures`"
    assert {p.name for p in COMMITTED.iterdir() if p.is_dir()} == set(VARIANTS)
