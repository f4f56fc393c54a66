"""What a config.json value counts as a number, the one guard every reader of counts, sizes and
factors uses: JSON's booleans are not numbers, and NaN, Infinity and 1e400 are not finite."""

from __future__ import annotations

import json

import pytest

from common.engine.vllm_args import positive
from common.model.context_length import derived_length
from common.model.json_numbers import integer, number, positive_int, positive_number

PARSED = json.loads('{"t": true, "nan": NaN, "inf": Infinity, "big": 1e400, "huge": ' + "9" * 400 + "}")


@pytest.mark.parametrize("key", ["t", "nan", "inf", "big", "huge"])
def test_what_json_can_hold_but_no_computation_should_take_is_no_number(key: str) -> None:
    assert number(PARSED[key]) is None
    assert positive_number(PARSED[key]) is None


def test_a_huge_integer_is_an_integer_but_not_a_float() -> None:
    assert positive_int(PARSED["huge"]) == PARSED["huge"]
    assert number(PARSED["huge"]) is None


def test_ranges_and_minimums() -> None:
    assert number(1.0, 0.0, 1.0, low_open=True) == 1.0
    assert number(0.0, 0.0, 1.0, low_open=True) is None
    assert number(0.0, 0.0, 1.0) == 0.0
    assert number(1.5, 0.0, 1.0) is None
    assert integer(0, 0) == 0 and positive_int(0) is None and integer(-3) == -3
    assert integer(True) is None and integer(2.0) is None and integer("2") is None


def test_an_argument_of_nan_or_inf_is_no_positive_value() -> None:
    assert positive("0.9") == 0.9 and positive("8", int) == 8
    assert positive("inf") is None and positive("nan") is None and positive("0") is None and positive("x") is None


def test_a_context_length_of_infinity_is_not_stated() -> None:
    rules = {"keys": ["max_position_embeddings", "n_positions"]}
    assert derived_length({"max_position_embeddings": PARSED["inf"]}, rules, False)[0] is None
    assert derived_length({"max_position_embeddings": PARSED["inf"], "n_positions": 4096}, rules, False)[:2] == (4096, "n_positions")
