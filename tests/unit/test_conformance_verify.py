"""A committed cell is a claim anyone can re-check (conformance/verify.py): every cell keeps the
ids its result follows from, and a result edited by hand does not hold."""

import copy
import json

from conformance import verify
from conformance.cases import ENGINES
from conformance.image_changes import image_change_cells
from conformance.matrix import RESULTS, cell_key

RESULTS_DATA = json.loads(RESULTS.read_text())


def test_every_committed_cell_keeps_the_ids_its_result_follows_from():
    assert verify.check_committed(RESULTS_DATA) == []


def test_a_result_edited_by_hand_is_named():
    cell = copy.deepcopy(next(c for c in RESULTS_DATA["cells"] if c["result"] == "exact"))
    assert verify.inconsistent(cell) is None
    edited = dict(cell, result="differs", first_difference=0)
    assert "its served ids are its reference's" in verify.inconsistent(edited)
    # served ids edited to go with the result: the ids part where the cell says
    served = list(cell["served"])
    served[3] = served[3] + 1
    edited = dict(cell, result="differs", served=served, first_difference=5)
    assert "first difference" in verify.inconsistent(edited)
    assert verify.inconsistent(dict(edited, first_difference=3)) is None  # consistent: only a run again tells (e2e)
    assert "reference ids are not" in verify.inconsistent(cell, reference=list(reversed(cell["reference"])))
    refused = dict(cell, result="refused", code="CPU")
    assert "keeps served ids" in verify.inconsistent(refused)
    assert "no digest" in verify.inconsistent(dict(cell, log_sha256=None))
    assert "no reference" in verify.inconsistent(dict(cell, reference=None))


def test_the_sample_rotates_with_its_seed_and_covers_every_engine():
    skip = {cell_key(c) for c in image_change_cells(RESULTS_DATA)}
    first, again, other = (verify.sample(RESULTS_DATA, s) for s in (7, 7, 8))
    assert [cell_key(c) for c in first] == [cell_key(c) for c in again]
    assert {cell_key(c) for c in first} != {cell_key(c) for c in other}
    for drawn in (first, other):
        assert len(drawn) >= verify.SAMPLE and len({cell_key(c) for c in drawn}) == len(drawn)
        assert not {cell_key(c) for c in drawn} & skip  # make test runs those again anyway
        for vllm in ENGINES:  # @next's 0.32 among them
            assert sum(c["vllm"] == vllm for c in drawn) >= verify.PER_ENGINE, vllm
        assert not any(c.get("same_start_as") for c in drawn)


def test_named_cells_are_those_of_the_cases_and_engines_named():
    cells = verify.named(RESULTS_DATA, ["llama2"], ["0.11.0"])
    assert cells and all(c["variant"] == "llama2" and c["vllm"] == "0.11.0" for c in cells)
    assert len(verify.named(RESULTS_DATA, ["llama2"])) > len(cells)
