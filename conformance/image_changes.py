"""The committed cells whose code paths the image changes: those `make test` runs again on the
real engines (tests/e2e/vllm055 and vllm011, test_image_change_cells_*), and whose models `make
test` saves while the engines are still being built (`python -m conformance models
--image-changes`)."""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Sequence, Tuple

from common.vllm_plugin.compat_backports import BACKPORTS_055, BACKPORTS_V1, Backport

from .cases import ENGINES, Engine

# Repairs that change the model the engine builds or how it runs (a backport, the CPU MoE path,
# split experts, an alias or a view, a kernel patch); the others (tokenizer, template, config
# values) reach the engine by arguments whose effect depends on the configuration.
MODEL_PATHS = {"R4", "R8", "R10", "R11", "H1", "H2"}

# The engine generations whose cards' images the e2e tier proves (the newest engine's cells are
# proven by their own tier), each with the backports its images register.
IMAGE_ENGINES: Sequence[Engine] = (ENGINES["0.5.5"], ENGINES["0.11.0"])
BACKPORTS_OF: Dict[str, Dict[str, Backport]] = {"0.5.5": BACKPORTS_055, "0.11.0": BACKPORTS_V1}


def _code(cell: Dict[str, Any]) -> Tuple[FrozenSet[str], str]:
    """The code the image runs a cell through: its model-path repairs, and under R10 the module of
    the backport (a vision-language checkpoint served as text shares its text model's), else the
    architecture."""
    paths = frozenset(set(cell.get("repairs") or ()) & MODEL_PATHS)
    backport = BACKPORTS_OF.get(cell["vllm"], {}).get(cell["architecture"]) if "R10" in paths else None
    return paths, backport.module if backport else cell["architecture"]


def image_changes(cells: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The cells whose code paths the image changes, the author's save first: at tensor-parallel
    size 1 one cell for each architecture and model-path repairs, and one for each other set of
    repairs with each rope configuration R5 hands over; above it one cell per model-path code
    (each backport's module, the CPU MoE path sharded). What the others share with these is
    proven by the rotating sample (`python -m conformance verify`)."""
    picked, seen = [], set()
    for cell in sorted(cells, key=lambda c: not c["saved_by"].startswith("5.")):
        repairs = frozenset(cell.get("repairs") or ())
        paths, code = _code(cell)
        if cell.get("tp", 1) > 1:
            key: Tuple[Any, ...] = (cell["card"], cell["tp"], paths, code) if paths else ()
        elif paths:
            key = (cell["card"], 1, paths, cell["architecture"])
        elif repairs:
            key = (cell["card"], repairs, cell["traits"]["rope"], cell["traits"]["partial_rotary"])
        else:
            key = ()
        if key and key not in seen:
            seen.add(key)
            picked.append(cell)
    return picked


def image_change_cells(results: Dict[str, Any], vllm: str = "") -> List[Dict[str, Any]]:
    """`image_changes` over the committed cells of the image engines' cards (of engine `vllm`
    alone, when given)."""
    cards = {card for engine in IMAGE_ENGINES if vllm in ("", engine.vllm) for card in engine.cards}
    return image_changes([c for c in results["cells"] if c["card"] in cards])
