"""The conformance cases (cases.toml) and the engines they run on.

A case is one tiny model of one architecture in one configuration; a cell is a case saved by
one transformers, run on one card through that card's launcher. Which transformers saves a
case for an engine: the author's (transformers 5) always, and a 4.x save too, since most real
checkpoints carry one: the engine's own transformers where it is older (a checkpoint of the
engine's own time), 4.57 on an engine that reads with transformers 5. A case runs at tensor-
parallel size 1 on every engine, and at the larger sizes cases.toml's [tensor_parallel] names it
for (a cell per size: sharding is where a model goes wrong silently).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from compat_build import toml_files
from harness.venvs import CheckoutVenv

from common.engine.engines import checkout_venv
from common.engine.profile import load_profile

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CASES = HERE / "cases.toml"


@dataclass(frozen=True)
class Saver(CheckoutVenv):
    """A transformers that saves the cases: its name in results, and the venv it runs in."""

    name: str
    venv: str


AUTHOR = Saver("v5", ".venv-author")
# The 4.x savers are the engine venvs' own transformers (4.55 beside vLLM 0.5.5, 4.57 beside 0.11).
SAVERS = {s.name: s for s in (AUTHOR, Saver("455", checkout_venv("iluvatar-bi100")), Saver("457", checkout_venv("nv-a100")))}


@dataclass(frozen=True)
class Engine(CheckoutVenv):
    """One engine generation as the matrix runs it: its venv, the cards it serves, the savers of
    its cells (the author, then the engine's own transformers where it is older), and the flags
    every start of it gets here."""

    vllm: str
    venv: str
    cards: Tuple[str, ...]
    savers: Tuple[str, ...]
    # Eager on the engines that compile by default: inductor costs 30-100 s a model on two cores
    # and computes the same greedy ids (tests/e2e/test_conformance.py holds one compiled cell to it).
    serve_args: Tuple[str, ...] = ()

    def available(self) -> bool:
        return self.python.exists() and (self.bin / "vllm").exists()


def _engine(cards: Tuple[str, ...], savers: Tuple[str, ...], serve_args: Tuple[str, ...] = ()) -> Engine:
    """The engine generation `cards` run: their profiles' vLLM, their card.toml's snapshot_env."""
    versions = {load_profile(card).vllm_version for card in cards}
    venvs = {checkout_venv(card) for card in cards}
    assert len(versions) == len(venvs) == 1, (cards, versions, venvs)
    return Engine(versions.pop(), venvs.pop(), cards, savers, serve_args)


ENGINES: Dict[str, Engine] = {
    e.vllm: e
    for e in (
        _engine(("iluvatar-bi100",), ("v5", "455")),
        _engine(("nv-a100", "hygon-k100"), ("v5", "457"), ("--enforce-eager",)),
        _engine(("nv-a100@next",), ("v5", "457"), ("--enforce-eager",)),
    )
}
# The platform's arguments of every cell: float32 (the reference's precision; the checkpoints are
# bf16) and a context every case fits.
PLATFORM_ARGS = ("--dtype", "float32", "--max-model-len", "256")


def load_cases(path: Path = CASES) -> List[Dict[str, Any]]:
    """Every case with its shape merged in as `shape` (a dict); names are unique."""
    data = toml_files.load(path)
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


def tensor_parallel(path: Path = CASES) -> Dict[str, Dict[int, Tuple[str, ...]]]:
    """Engine generation -> tensor-parallel size above 1 -> the cases that run there too
    (cases.toml's [tensor_parallel]); every name must be a case's."""
    data = toml_files.load(path)
    names = {c["name"] for c in data["case"]}
    out: Dict[str, Dict[int, Tuple[str, ...]]] = {}
    for vllm, sizes in data.get("tensor_parallel", {}).items():
        if vllm not in ENGINES:
            raise ValueError(f"cases.toml: [tensor_parallel] names no engine {vllm!r}")
        for size, cases in sizes.items():
            unknown = sorted(set(cases) - names)
            if unknown or int(size) < 2:
                raise ValueError(
                    f"cases.toml: [tensor_parallel.{vllm!r}] {size}: {'no case ' + ', '.join(unknown) if unknown else 'a size below 2'}"
                )
            out.setdefault(vllm, {})[int(size)] = tuple(cases)
    return out


def tp_sizes(case: str, engine: Engine, table: Optional[Dict[str, Dict[int, Tuple[str, ...]]]] = None) -> Tuple[int, ...]:
    """The tensor-parallel sizes `case` runs at on `engine`: 1, then those the table names it for."""
    sizes = (table if table is not None else tensor_parallel()).get(engine.vllm, {})
    return (1,) + tuple(sorted(size for size, cases in sizes.items() if case in cases))


def tp_args(tp: int) -> Tuple[str, ...]:
    """What the platform adds to a start at tensor-parallel size `tp` (nothing at 1)."""
    return ("--tensor-parallel-size", str(tp)) if tp > 1 else ()


def case_key(case: Dict[str, Any], saver: str) -> str:
    """What a saved model depends on: the case, the saver, and the code that makes it."""
    h = hashlib.sha256()
    h.update(json.dumps(case, sort_keys=True).encode())
    h.update(saver.encode())
    for source in (HERE / "build.py", ROOT / "harness" / "fixtures" / "build_model.py"):
        h.update(source.read_bytes())
    return h.hexdigest()[:16]
