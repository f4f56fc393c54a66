"""Which Python answers a card's engine-side checks in doctor, and why that one.

In order: the variable that names it (COMPAT_ENGINE_PYTHON for a card's default engine,
COMPAT_ENGINE_PYTHON_<VARIANT> for a variant: `_NEXT` for nv-a100@next; a variant `--card` names
itself takes COMPAT_ENGINE_PYTHON where its own is not set); inside an image, the image's own Python for the image's card (its engine's); in
a checkout, the engine venv its profile was snapshotted from (the card's `snapshot_env`, e.g.
.venv-engine, which `make envs` builds; engine_venvs.json, written by `make profiles`, says
which); else, for a default engine, the Python running doctor, and for a variant none at all:
its checks cannot run and its verdict is "unverified", never another engine's.

Only doctor resolves engines this way; launch and preflight keep COMPAT_ENGINE_PYTHON or their
own interpreter (inside an image they are the same).
"""

from __future__ import annotations

import os
import sys

from .profile import VARIANT_SEP, image_card

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping

# The checkout this runtime package sits in (its parent): where the engine venvs are.
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# card -> its engine venv, relative to the checkout (`make profiles` writes it from card.toml).
ENGINE_VENVS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_venvs.json")
VARIABLE = "COMPAT_ENGINE_PYTHON"


class EnginePython:
    """An interpreter for the engine-side checks (`path`, "" for none) and where it came from."""

    __slots__ = ("path", "source")

    def __init__(self, path: str, source: str) -> None:
        self.path, self.source = path, source

    def to_json(self) -> Dict[str, Any]:
        return {"path": self.path or None, "source": self.source}

    def describe(self) -> str:
        return describe(self.to_json())

    def env(self, env: Mapping[str, str]) -> Dict[str, str]:
        """`env` with COMPAT_ENGINE_PYTHON set to this interpreter (common/start/verify.py runs it); without
        one, to a name no interpreter has, so every check says it could not run."""
        return dict(env, **{VARIABLE: self.path or f"(no engine Python: {self.source})"})


def describe(engine: Mapping[str, Any]) -> str:
    """An engine Python as a person reads it: its path (relative, when under the current
    directory) and where it came from."""
    path = engine.get("path")
    if not path:
        return str(engine.get("source"))
    try:
        relative = os.path.relpath(str(path))
    except ValueError:  # another drive, on Windows
        relative = str(path)
    return f"{path if relative.startswith('..') else relative} ({engine.get('source')})"


def variables_for(card: str, asked: bool = False) -> List[str]:
    """The variables that name `card`'s engine Python, the first set wins: COMPAT_ENGINE_PYTHON
    for a card's default engine, COMPAT_ENGINE_PYTHON_<VARIANT> for a variant. A variant --card
    names itself takes COMPAT_ENGINE_PYTHON too, after its own: a user who set both (as
    docs/images-and-releases.md shows) named the variant's engine with its own variable, and the
    other is the default engine's."""
    if VARIANT_SEP not in card:
        return [VARIABLE]
    own = VARIABLE + "_" + card.split(VARIANT_SEP, 1)[1].upper().replace("-", "_")
    return [own, VARIABLE] if asked else [own]


def checkout_venv(card: str) -> str:
    """The checkout's engine venv of `card` (relative to the checkout), or "" when none is named."""
    import json

    try:
        with open(ENGINE_VENVS, encoding="utf-8") as fh:
            venvs = json.load(fh)
    except (OSError, ValueError):
        return ""
    venv = venvs.get(card) if isinstance(venvs, dict) else None
    return venv if isinstance(venv, str) and venv and not os.path.isabs(venv) else ""


def make_target(venv: str) -> str:
    """The Makefile target that builds a checkout's venv: `.venv-engine055` -> `engine055-env`."""
    return venv.lstrip(".").removeprefix("venv-") + "-env"


def checkout_python(card: str, root: str = "") -> str:
    """The Python of the checkout's engine venv of `card`, or "" when it is not there."""
    venv = checkout_venv(card)
    if not venv:
        return ""
    path = os.path.join(root or CHECKOUT, venv, "bin", "python")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else ""


def resolve(card: str, env: Mapping[str, str], asked: bool = False, root: str = "") -> EnginePython:
    """The interpreter doctor verifies `card` with (see the module's docstring); `asked`: the
    card is the one --card names (a variant named itself takes COMPAT_ENGINE_PYTHON too)."""
    names = variables_for(card, asked)
    for name in names:
        if env.get(name):
            return EnginePython(env[name], name)
    if image_card() == card:  # the image's Python is its own card's engine, no other's
        return EnginePython(sys.executable, "the image's own Python")
    venv = checkout_python(card, root)
    if venv:
        return EnginePython(venv, "this checkout's engine venv")
    unset = " or ".join(names)
    if VARIABLE in names:
        return EnginePython(sys.executable, f"the Python running doctor: no {unset} set and no engine venv in this checkout")
    return EnginePython("", f"no {unset} set and no {checkout_venv(card) or 'engine venv'} in this checkout")
