"""The cells whose code paths the image changes (conformance/image_changes.py), run again on one
engine generation's real engine and compared with what conformance/results.json says. Each
generation's test module (vllm055/, vllm011/) runs its own, so that `make test`'s two workers
share them."""

from __future__ import annotations

import json
from typing import Dict, List, Tuple

import pytest

from conformance.cases import ENGINES
from conformance.image_changes import image_change_cells
from conformance.matrix import RESULTS, cell_id, cell_key, run_cells, select_cases
from harness.starts import record


def changed_cells(vllm: str) -> List[Tuple[Tuple, str, str]]:
    """Each image-change cell of engine `vllm` whose result or code came out other than committed:
    (cell, committed result, result now). Skips where the engine's venv is missing."""
    engine = ENGINES[vllm]
    if not engine.available():
        pytest.skip(f"no {engine.venv}: run `make {engine.make_target}`")
    results = json.loads(RESULTS.read_text())
    committed = {cell_key(c): c for c in image_change_cells(results, vllm)}
    assert [c for c in committed.values() if "R10" in c["repairs"]], "the backports are among them"
    assert [c for c in committed.values() if "R10" in c["repairs"] and c["tp"] > 1], "and sharded"
    saver_of = {(case, version): saver for case, saves in results["models"].items() for saver, version in saves.items()}
    keep = {cell_id(v, saver_of[v, saved_by], card, tp) for v, saved_by, card, tp in committed}
    again: List[Dict] = run_cells(
        select_cases(sorted({v for v, _, _, _ in committed})), [engine], jobs=2, only=lambda cell: cell["id"] in keep
    )
    record("cell", sum(1 for c in again if not c.get("same_start_as")))  # the others are a start made before
    got = {cell_key(c): c for c in again}
    return [
        (key, committed[key]["result"], got.get(key, {}).get("result"))
        for key in committed
        if got.get(key, {}).get("result") != committed[key]["result"] or got[key].get("code") != committed[key].get("code")
    ]
