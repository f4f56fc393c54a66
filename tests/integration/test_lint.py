"""Lint as part of the suite: the same linters, with the same settings, as `make lint` and the
release check (compat_build/lint.py)."""

import pytest

from compat_build import lint


@pytest.mark.parametrize("name", list(lint.LINTERS))
def test_lint(name):
    ok, output = lint.run(name)
    assert ok, output


def test_every_shell_script_is_linted():
    scripts = lint.shell_scripts()
    assert {"common/entrypoint.sh", ".ci/run", "scripts/make-venv.sh", "envs/engine/install.sh"} <= set(scripts)
