"""The committed cells whose code paths the image changes: those `make test` runs again on the
real engines (tests/e2e/test_conformance.py), and whose models `make test` saves while the
engines are still being built (`python -m conformance models --image-changes`)."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

from .cases import ENGINES, Engine

# Repairs that change the model the engine builds or how it runs (a backport, the CPU MoE path,
# split experts, an alias or a view, a kernel patch); the others (tokenizer, template, config
# values) reach the engine by arguments whose effect depends on the configuration.
MODEL_PATHS = {"R4", "R8", "R10", "R11", "H1", "H2"}

# The engine generations whose cards' images the e2e tier proves (the newest engine's cells are
# proven by their own tier).
IMAGE_ENGINES: Sequence[Engine] = (ENGINES["0.5.5"], ENGINES["0.11.0"])


def image_changes(cells: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The cells whose code paths the image changes: at tensor-parallel size 1 every cell with a
    model-path repair, and one cell for each other set of repairs with each rope configuration R5
    hands over; above it one cell per architecture and model-path repairs (each backport, the CPU
    MoE path sharded), the author's save first."""
    picked, seen = [], set()
    sharded = sorted((c for c in cells if c.get("tp", 1) > 1), key=lambda c: not c["saved_by"].startswith("5."))
    for cell in sharded:
        paths = frozenset(set(cell.get("repairs") or ()) & MODEL_PATHS)
        key = (cell["card"], cell["tp"], cell["architecture"], paths)
        if paths and key not in seen:
            seen.add(key)
            picked.append(cell)
    for cell in cells:
        repairs = set(cell.get("repairs") or ())
        if not repairs or cell.get("tp", 1) > 1:
            continue
        key = (cell["card"], frozenset(repairs), cell["traits"]["rope"], cell["traits"]["partial_rotary"])
        if repairs & MODEL_PATHS or key not in seen:
            seen.add(key)
            picked.append(cell)
    return picked


def image_change_cells(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """`image_changes` over the committed cells of the image engines' cards."""
    cards = {card for engine in IMAGE_ENGINES for card in engine.cards}
    return image_changes([c for c in results["cells"] if c["card"] in cards])
