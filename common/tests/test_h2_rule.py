"""H2: a head_dim the engine's transformers reads as None, on an engine whose get_head_size uses
it as is (vLLM 0.5.5, from its profile); vLLM 0.11 falls back by itself and gets nothing."""

import json
from functools import partial
from pathlib import Path

import pytest

from common.tests.helpers import TINY_MIXTRAL, model_dir, of_rule, only_rule, preflight_json

MIXTRAL = TINY_MIXTRAL


only_h2 = only_rule("R2,R3,R3b,R4,R5,H1,R7,MB", "only_h2")


h2 = partial(of_rule, code="H2")  # (repairs, findings) of H2 in a plan


def test_mixtral_without_head_dim_gets_it_written_through_a_view_on_bi100(tmp_path, env_for_tests):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": MIXTRAL}), "iluvatar-bi100", env=env_for_tests)
    [repair], _ = h2(plan)
    assert repair["config_edits"] == {"head_dim": 64} and repair["verified"] is True
    assert "transformers 4.55.4's mixtral config sets it to None" in repair["detail"]
    view = Path(plan["view"]["path"])
    assert plan["model_path"] == str(view) and json.loads((view / "config.json").read_text())["head_dim"] == 64
    assert plan["args"] == ["--served-model-name", str(tmp_path / "m")]


@pytest.mark.parametrize(
    "config",
    [
        MIXTRAL,  # nv-a100: 0.11 falls back by itself
        dict(MIXTRAL, head_dim=64),  # explicit: nothing to do
    ],
)
def test_nothing_where_the_engine_needs_nothing(tmp_path, env_for_tests, config):
    for card in ("nv-a100", "iluvatar-bi100") if "head_dim" in config else ("nv-a100",):
        plan = preflight_json(model_dir(tmp_path / card, {"config.json": config}), card, env=env_for_tests)
        assert h2(plan) == ([], []) and plan["args"] == [] and plan["view"] is None


def test_an_explicit_null_breaks_any_model_type_on_bi100(tmp_path, env_for_tests):
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "head_dim": None}
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": llama}), "iluvatar-bi100", env=env_for_tests)
    [repair], _ = h2(plan)
    assert repair["config_edits"] == {"head_dim": 128} and "is null in config.json" in repair["detail"]


def test_no_head_size_to_write_is_an_error(tmp_path, env_for_tests):
    config = dict(MIXTRAL, hidden_size=250, num_attention_heads=4)  # not divisible
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": config}), "iluvatar-bi100", env=env_for_tests)
    repairs, [finding] = h2(plan)
    assert repairs == [] and finding["severity"] == "error" and plan["view"] is None
