"""The values the start changes are judged with the start: --rope-theta and --rope-scaling change
the configuration the engine reads, --disable-sliding-window drops the window and caps the
context, and --dtype (auto: the configuration's) is the dtype the engine computes in, which every
cell ran in float32. doctor's `tokens` is proven only where a cell ran that configuration and
dtype."""

from __future__ import annotations

import json

import pytest

from common.engine.conformance_cells import judge_start
from common.engine.start_flags import served_dtype, with_start_flags
from common.engine.vllm_args import UserArgs
from common.model.config_traits import config_traits
from harness.fixtures.published_configs import LLAMA_31_8B

PLATFORM = ["--max-model-len", "4096"]
CARDS = ("iluvatar-bi100", "nv-a100", "hygon-k100", "nv-a100@next")


@pytest.mark.parametrize(
    "config, flag, served",
    [
        ({"torch_dtype": "bfloat16"}, None, "bfloat16"),
        ({"torch_dtype": "bfloat16"}, "auto", "bfloat16"),
        ({"dtype": "float32"}, None, "float16"),  # auto serves a float32 model in half precision
        ({}, None, "float16"),  # no dtype: the engine takes it for float32
        ({"text_config": {"dtype": "bfloat16"}}, None, "bfloat16"),
        ({"torch_dtype": "bfloat16"}, "float32", "float32"),
        ({"torch_dtype": "bfloat16"}, "half", "float16"),
    ],
)
def test_the_dtype_a_start_computes_in(config, flag, served):
    assert served_dtype(config, flag) == served


def test_rope_flags_change_the_configuration_the_engine_reads():
    v5 = {"model_type": "qwen2", "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}, "max_position_embeddings": 32768}
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    view, _, problems = with_start_flags(v5, UserArgs(["--rope-scaling", json.dumps(yarn), "--rope-theta", "5e5"]), None)
    assert problems == [] and view["rope_scaling"] == yarn and view["rope_theta"] == 5e5
    assert view["rope_parameters"] == {"rope_type": "yarn", "rope_theta": 5e5, "factor": 4.0, "original_max_position_embeddings": 32768}
    assert config_traits(v5)["rope"] == "default" and config_traits(view)["rope"] != "default"
    assert v5["rope_parameters"]["rope_type"] == "default"  # the file's configuration is not touched
    _, _, problems = with_start_flags(v5, UserArgs(["--rope-scaling", "yarn", "--rope-theta", "inf"]), None)
    assert problems == [
        "--rope-theta that doctor cannot read as a positive number",
        "--rope-scaling that doctor cannot read as one JSON object",
    ]


@pytest.mark.parametrize("nest", [None, "text_config"])
def test_disable_sliding_window_drops_the_window_and_caps_the_context(nest):
    text = {"model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}
    config = {"text_config": text, "model_type": "llava"} if nest else text
    view, context, _ = with_start_flags(config, UserArgs(["--disable-sliding-window"]), "8192")
    assert context == "4096" and (view[nest] if nest else view)["sliding_window"] is None
    assert with_start_flags(config, UserArgs(["--disable-sliding-window"]), "1024")[1] == "1024"
    assert with_start_flags(config, UserArgs(["--disable-sliding-window"]), None)[1] == "4096"
    assert with_start_flags(config, UserArgs([]), "8192") == (config, "8192", [])


@pytest.mark.parametrize("card", CARDS)
def test_tokens_are_proven_in_the_dtype_and_configuration_the_cells_ran(card):
    tokens, _, open_list = judge_start(card, LLAMA_31_8B, UserArgs([*PLATFORM, "--dtype", "float32"]))
    assert (tokens, open_list) == ("proven", [])
    # Served as its file says (bfloat16): no cell ran that dtype.
    tokens, _, open_list = judge_start(card, LLAMA_31_8B, UserArgs(PLATFORM))
    assert tokens == "unproven" and "@dtype=bfloat16" in open_list, open_list
    # Dynamic NTK enabled at the start, which no Llama cell ran.
    dynamic = ["--rope-scaling", '{"rope_type": "dynamic", "factor": 2.0}']
    tokens, _, open_list = judge_start(card, LLAMA_31_8B, UserArgs([*PLATFORM, "--dtype", "float32", *dynamic]))
    assert tokens == "unproven" and any("dynamic" in item for item in open_list), open_list
