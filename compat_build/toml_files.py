"""TOML on every Python the project's tooling runs on: 3.11's tomllib; on 3.10 tomli (the release
runner pins it: envs/release/requirements.txt), else pip's own vendored copy (the BI-100 engine
venv's Python 3.10 has no other, and scripts/fetch_upstream.py runs there). Standard library (and
pip) only: the release workflow's first steps run on a bare Python."""

from __future__ import annotations

from typing import Any, Dict

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef]
    except ImportError:
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]

TOMLDecodeError = tomllib.TOMLDecodeError


def load(path: Any) -> Dict[str, Any]:
    """The TOML file at `path`, parsed (OSError and TOMLDecodeError pass through)."""
    with open(path, "rb") as fh:
        return tomllib.load(fh)
