"""doctor's `tokens` on the configurations popular checkpoints publish (harness/fixtures/
published_configs.py): proven where the committed cells exercised every value their model code
reads, on every engine generation the newest included (4.x savers have cells there), and a value
one of them changes keeps them unproven, named."""

from __future__ import annotations

import pytest

from common.engine.conformance_cells import judge
from harness.fixtures.published_configs import LLAMA_31_8B, PUBLISHED

CARDS = ("iluvatar-bi100", "nv-a100", "hygon-k100", "nv-a100@next")
CONTEXT = "4096"  # the platform's usual --max-model-len


def proven(card):
    return sorted(name for name, config in PUBLISHED.items() if judge(card, config, CONTEXT)[0] == "proven")


def test_most_published_models_are_proven_on_the_newest_engine_by_their_4x_saves():
    assert {c["transformers_version"][0] for c in PUBLISHED.values()} == {"4"}
    assert len(proven("nv-a100@next")) >= 10, proven("nv-a100@next")


@pytest.mark.parametrize("card", CARDS)
def test_a_published_model_not_proven_says_why(card):
    for name, config in PUBLISHED.items():
        tokens, cell, open_values = judge(card, config, CONTEXT)
        if tokens == "unproven":
            assert open_values, name  # a user reads tokens_open to learn what no cell ran
        elif tokens != "proven":  # differs, or a refusal: the failing cell is named
            assert cell is not None and cell["result"] != "exact", name


@pytest.mark.parametrize("card", CARDS)
def test_one_value_no_cell_ran_makes_a_proven_model_unproven_and_is_named(card):
    assert judge(card, LLAMA_31_8B, CONTEXT)[0] == "proven"
    for change, named in (
        ({"hidden_act": "gelu"}, "hidden_act=gelu"),
        ({"rope_scaling": dict(LLAMA_31_8B["rope_scaling"], rope_type="dynamic")}, "rope_scaling.rope_type=dynamic"),
        ({"hidden_size": 4096 + 32 * 16}, "@head_size=144"),
        ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "@quantization=awq"),
    ):
        tokens, _, open_values = judge(card, dict(LLAMA_31_8B, **change), CONTEXT)
        assert tokens == "unproven" and named in open_values, (change, open_values)
    tokens, _, open_values = judge(card, LLAMA_31_8B, CONTEXT, tp=8)
    assert tokens == "unproven" and "@tensor_parallel_size=8" in open_values
