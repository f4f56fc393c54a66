"""What a cell ran, as one hash: its case and saver, its engine venv, and the project files on its
start path. A committed cell whose fingerprint no longer matches the code is stale: its result
proves code that is gone (`python -m conformance stale` names them; `make conformance` re-runs them).

The start path of a cell is what the image runs for that model on that card:
- the launcher and every project module it imports (found from the source, not listed by hand),
  and every rule that repairs (the registry imports rules by name, so the import graph cannot see
  them). A rule that only finds ("runtime check": KV, C1, CTX, ...) is not on the path, nor what
  only it imports: the launcher execs the engine whatever the findings say, so a check cannot
  change what a cell ran;
- the vLLM plugin the engine loads in every process (its engine patches too), the shims of vendor modules, and the
  backport of the cell's architecture where there is one, with what each imports;
- the card's own files, its engine profile, and the engine tables a repairing rule reads (START_DATA);
- the engine venv's spec (envs/<name>/: versions, its lock, the harness patches of the CPU
  stand-in) and what is installed in it, the platform's arguments every cell starts with, and the
  worker that drives the engine;
- the saver's venv spec, and the author's (the reference tokens are transformers 5's).

doctor's verdict on each cell's model (the `doctor` of each cell) is of doctor's code as a whole:
`doctor_fingerprint` (doctor, its checks and the engine-side model build, every rule, the data
doctor reads: the baked cells, the field table, the profiles, and the engine venvs' specs), kept
as `judged_with` in results.json.

C1's scope (C1_ARCHITECTURES in common/rules/support/scopes.py) is left out: it is written from the
cells' results by `python -m conformance judge`, so it is their verdict, not their path.
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Optional, Tuple

from compat_build import import_graph

from .cases import AUTHOR, ENGINES, PLATFORM_ARGS, ROOT, SAVERS, Engine, case_key, tp_args

COMMON = ROOT / "common"
PLUGIN = COMMON / "vllm_plugin"
BACKPORTS = PLUGIN / "compat_backports"
LAUNCH_ROOTS = (COMMON / "start" / "launch.py", ROOT / "harness" / "engine_worker.py", ROOT / "harness" / "engine_env.py")
# The engine tables under common/engine/ that a repairing rule reads at every start.
START_DATA = ("config_names.json",)
EXCLUDED_ASSIGNMENTS = {COMMON / "rules" / "support" / "scopes.py": "C1_ARCHITECTURES"}


@cache
def closure(roots: Tuple[Path, ...], stops: FrozenSet[Path] = frozenset()) -> FrozenSet[Path]:
    """`roots` and every project file they run, transitively, not through `stops` (the project's
    one reader of its imports: compat_build/import_graph.py)."""
    return import_graph.closure(roots, stops)


def _files_under(folder: Path, suffixes: Iterable[str] = ()) -> Tuple[Path, ...]:
    wanted = tuple(suffixes)
    return tuple(
        sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts and (not wanted or p.suffix in wanted))
    )


def rule_modules() -> Dict[Path, List[type]]:
    """Each rule module of common/rules/ (one per code; support/ holds none) and the Rule classes
    it defines, not those it imports."""
    import importlib
    import inspect

    from common.rules.support.base import Rule

    out: Dict[Path, List[type]] = {}
    for path in sorted((COMMON / "rules").glob("*.py")):
        if path.stem == "__init__":
            continue
        module = importlib.import_module(f"common.rules.{path.stem}")
        out[path] = [
            c
            for c in vars(module).values()
            if inspect.isclass(c) and issubclass(c, Rule) and c is not Rule and c.__module__ == module.__name__
        ]
    return out


@cache
def check_only_rules() -> FrozenSet[Path]:
    """The rule modules whose rules only find (kind "runtime check"), never repair."""
    from common.code_kinds import CHECK

    return frozenset(path for path, rules in rule_modules().items() if {c.kind for c in rules} == {CHECK})


def _backport_module(card: str, architecture: str) -> Optional[Path]:
    """The backport file of `architecture` that fits `card`'s engine (its profile's layer API, as
    R10 picks it), from the plugin's table (standard library only)."""
    import importlib

    backports = importlib.import_module("common.vllm_plugin.compat_backports")
    profile = importlib.import_module("common.engine.profile").load_profile(card)
    entry, missing = backports.fitting(architecture, profile.layer_api)
    return BACKPORTS / f"{entry.module}.py" if entry is not None and missing == [] else None


def path_files(card: str, architecture: str) -> List[Path]:
    """The project files on the start path of `architecture` on `card` (see the module's doc)."""
    roots = list(LAUNCH_ROOTS)
    roots += _files_under(COMMON / "rules", (".py",))
    roots += [p for p in PLUGIN.glob("*.py")]
    roots += [
        BACKPORTS / "__init__.py",
        *_files_under(PLUGIN / "compat_configs", (".py",)),
        *_files_under(PLUGIN / "compat_patches", (".py",)),
    ]
    backport = _backport_module(card, architecture)
    if backport is not None:
        roots.append(backport)
    stops = check_only_rules()
    files = set(closure(tuple(sorted(set(roots) - stops)), stops))
    files.update(_files_under(COMMON / "shims"))
    files.add(COMMON / "entrypoint.sh")
    card_dir = ROOT / "cards" / card.split("@")[0]
    files.update(p for p in _files_under(card_dir) if not p.name.startswith("task_info"))  # rendered, read by CI only
    files.add(COMMON / "engine" / "profiles" / f"{card}.json")
    # Data a repairing rule reads (R13's names), which no import shows.
    files.update(COMMON / "engine" / name for name in START_DATA)
    return sorted(p for p in files if p.is_file())


def _source_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    name = EXCLUDED_ASSIGNMENTS.get(path)
    if name is None:
        return data
    text = data.decode("utf-8")
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in tree.body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            del lines[node.lineno - 1 : node.end_lineno]
            break
    return "".join(lines).encode("utf-8")


@cache
def _file_hash(path: Path) -> str:
    return hashlib.sha256(_source_bytes(path)).hexdigest()


@cache
def installed(venv: str) -> str:
    """What the venv at `venv` holds: its distributions' names and versions, read from their
    metadata folders ("not built" without one). pip is left out: make-venv.sh upgrades it before
    the install, and it is the installer, not what a cell runs."""
    sites = sorted((ROOT / venv).glob("lib/python*/site-packages"))
    if not sites:
        return "not built"
    names = sorted(p.name[: -len(".dist-info")] for p in sites[0].glob("*.dist-info") if not p.name.lower().startswith("pip-"))
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def venv_spec(venv: str) -> str:
    """The hash of a venv: its spec (envs/<name>/ with its lock, as scripts/make-venv.sh keys its
    cache) and what is installed in it (`installed`: a venv built otherwise than its spec says is
    another venv)."""
    name = venv.lstrip(".").removeprefix("venv-")
    h = hashlib.sha256()
    for path in _files_under(ROOT / "envs" / name):
        h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    h.update((ROOT / "scripts" / "make-venv.sh").read_bytes() + (ROOT / "envs" / "source_edits.py").read_bytes())
    h.update(f"installed {installed(venv)}".encode())
    return h.hexdigest()[:16]


def fingerprint(case: Dict, saver: str, engine: Engine, card: str, tp: int = 1) -> str:
    """One cell's fingerprint: 16 hex digits. The tensor-parallel size is in the arguments it
    hashes (none at size 1: a cell's start is the platform's arguments plus the size's flag)."""
    h = hashlib.sha256()
    h.update(f"case {case_key(case, saver)}\n".encode())
    for venv in sorted({SAVERS[saver].venv, AUTHOR.venv}):  # the save, and the reference tokens
        h.update(f"saver {venv} {venv_spec(venv)}\n".encode())
    h.update(f"engine {engine.vllm} {venv_spec(engine.venv)}\n".encode())
    h.update(("args " + " ".join(PLATFORM_ARGS + engine.serve_args + tp_args(tp)) + "\n").encode())
    for path in path_files(card, case["architecture"]):
        h.update(f"{path.relative_to(ROOT)} {_file_hash(path)}\n".encode())
    return h.hexdigest()[:16]


def doctor_fingerprint() -> str:
    """What doctor's verdicts on the cells' models depend on (the module's doc)."""
    roots = [*_files_under(COMMON / "doctor", (".py",)), COMMON / "cli.py"]
    roots += _files_under(COMMON / "engine_checks", (".py",)) + _files_under(COMMON / "rules", (".py",))
    files = set(closure(tuple(sorted(roots))))
    files.update((COMMON / "engine").glob("*.json"))
    files.update((COMMON / "engine" / "profiles").glob("*.json"))
    h = hashlib.sha256()
    for engine in ENGINES.values():  # doctor asks the engines' Pythons
        h.update(f"venv {engine.venv} {venv_spec(engine.venv)}\n".encode())
    for path in sorted(files):
        h.update(f"{path.relative_to(ROOT)} {hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return h.hexdigest()[:16]
