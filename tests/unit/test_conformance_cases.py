"""The conformance cases can see what they claim to prove: a windowed case's tokens change when
its window is turned off, a soft-capped case's when its attention cap is, in the author's own
eager attention (conformance/build.py keeps only such a model, and says so in its record)."""

from conformance.cases import AUTHOR, load_cases
from conformance.models import ensure, record

CASES = load_cases()
WINDOWED = [c for c in CASES if c.get("window")]
CAPPED = [c for c in CASES if c.get("cap")]


def test_every_case_with_an_attention_cap_is_built_to_show_it():
    declared = {c["name"] for c in CASES if (c.get("args") or {}).get("attn_logit_softcapping")}
    assert declared and declared == {c["name"] for c in CAPPED}


def test_the_authors_tokens_change_with_the_window_or_the_cap_off():
    ensure(WINDOWED + CAPPED, [AUTHOR.name])
    for case in WINDOWED:
        assert record(case, AUTHOR.name).get("window_visible") is True, case["name"]
    for case in CAPPED:
        assert record(case, AUTHOR.name).get("cap_visible") is True, case["name"]
