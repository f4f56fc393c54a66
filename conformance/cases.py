"""The conformance cases (cases.toml) and the engines they run on.

A case is one tiny model of one architecture in one configuration; a cell is a case saved by
one transformers, run on one card through that card's launcher. Which transformers saves a
case for an engine: the author's (transformers 5) always, and a 4.x save too, since most real
checkpoints carry one: the engine's own transformers where it is older (a checkpoint of the
engine's own time), 4.57 on an engine that reads with transformers 5.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Tuple

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = HERE / "cases.toml"


@dataclass(frozen=True)
class Saver:
    """A transformers that saves the cases: its name in results, and the venv it runs in."""

    name: str
    venv: str
    make_target: str

    @property
    def python(self) -> Path:
        return ROOT / self.venv / "bin" / "python"


AUTHOR = Saver("v5", ".venv-author", "author-env")
SAVERS = {s.name: s for s in (AUTHOR, Saver("455", ".venv-engine055", "engine055-env"), Saver("457", ".venv-engine", "engine-env"))}


@dataclass(frozen=True)
class Engine:
    """One engine generation as the matrix runs it: its venv, the cards it serves, the savers of
    its cells (the author, then the engine's own transformers where it is older), and the flags
    every start of it gets here."""

    vllm: str
    venv: str
    make_target: str
    cards: Tuple[str, ...]
    savers: Tuple[str, ...]
    # Eager on the engines that compile by default: inductor costs 30-100 s a model on two cores
    # and computes the same greedy ids (tests/e2e/test_conformance.py holds one compiled cell to it).
    serve_args: Tuple[str, ...] = ()

    @property
    def python(self) -> Path:
        return ROOT / self.venv / "bin" / "python"

    def available(self) -> bool:
        return self.python.exists() and (ROOT / self.venv / "bin" / "vllm").exists()


ENGINES: Dict[str, Engine] = {
    e.vllm: e
    for e in (
        Engine("0.5.5", ".venv-engine055", "engine055-env", ("iluvatar-bi100",), ("v5", "455")),
        Engine("0.11.0", ".venv-engine", "engine-env", ("nv-a100", "hygon-k100"), ("v5", "457"), ("--enforce-eager",)),
        Engine("0.32.0", ".venv-engine-next", "engine-next-env", ("nv-a100@next",), ("v5", "457"), ("--enforce-eager",)),
    )
}
# The platform's arguments of every cell: float32 (the reference's precision; the checkpoints are
# bf16) and a context every case fits.
PLATFORM_ARGS = ("--dtype", "float32", "--max-model-len", "256")


def load_cases(path: Path = CASES) -> List[Dict[str, Any]]:
    """Every case with its shape merged in as `shape` (a dict); names are unique."""
    with open(path, "rb") as fh:
        data = tomllib.load(fh)
    shapes = data.get("shapes", {})
    cases = []
    seen = set()
    for raw in data["case"]:
        case = dict(raw)
        if case["name"] in seen:
            raise ValueError(f"cases.toml: case {case['name']!r} twice")
        seen.add(case["name"])
        case["shape"] = dict(shapes[raw["shape"]]) if "shape" in raw else {}
        cases.append(case)
    return cases


def case_key(case: Dict[str, Any], saver: str) -> str:
    """What a saved model depends on: the case, the saver, and the code that makes it."""
    h = hashlib.sha256()
    h.update(json.dumps(case, sort_keys=True).encode())
    h.update(saver.encode())
    for source in (HERE / "build.py", ROOT / "tests" / "fixtures" / "build_model.py"):
        h.update(source.read_bytes())
    return h.hexdigest()[:16]
