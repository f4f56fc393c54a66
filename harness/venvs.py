"""A venv of the checkout as the tools and the tests name it: the link `make` keeps (.venv-engine,
.venv-author, ...), the Python and bin behind it, and the make target that builds it. The
conformance savers and engines (conformance/cases.py) and the test harness's engines
(harness/engine.py) are such venvs."""

from __future__ import annotations

from pathlib import Path

from common.engine.engines import make_target

ROOT = Path(__file__).resolve().parents[1]


class CheckoutVenv:
    """For a dataclass with a `venv` field (the link's name under the checkout's root)."""

    venv: str

    @property
    def bin(self) -> Path:
        return ROOT / self.venv / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def make_target(self) -> str:
        return make_target(self.venv)
