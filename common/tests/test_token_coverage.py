"""Deny by default: `tokens: proven` only where exact cells exercised every value the model code
reads (at the tensor-parallel size asked, with the checkpoint's quantization), and a known
difference fails the model wherever its culprit appears, whatever else the configuration says.

The tables are baked by the matrix's own baker (conformance/report.py) from cells made here, and
the fields are the generated common/engine/model_fields.json, so these tests hold the real pipeline."""

import json

import pytest

from common.doctor import doctor_many

from common.engine import conformance_cells
from common.model.config_traits import config_traits, sharding
from common.model.config_values import config_values, uncovered, value_class
from common.doctor.doctor import tokens_of
from common.model.modeldir import ModelDir
from common.engine.profile import load_profile
from common.rules.support.base import Context
from common.rules.c1_conformance import RULE as C1
from common.engine.vllm_args import UserArgs
from conformance.report import baked

from common.tests.helpers import model_dir

CARD, VLLM = "nv-a100", "0.11.0"
CONTEXT = "256"
MISTRAL = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 4096,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "vocab_size": 512,
    "transformers_version": "4.57.6",
}


def fields(arch):
    return conformance_cells.fields_table()["engines"][VLLM][arch]


def result_cell(config, result, variant, tp=1, **extra):
    """A cell of results.json as conformance/matrix.py writes it for `config`."""
    arch = config["architectures"][0]
    return dict(
        architecture=arch,
        variant=variant,
        card=CARD,
        vllm=VLLM,
        saved_by=config["transformers_version"],
        result=result,
        tp=tp,
        traits=config_traits(config, CONTEXT),
        values=config_values(config, fields(arch), None, tp),
        **({"sharding": sharding(config, tp)} if tp > 1 else {}),
        **extra,
    )


@pytest.fixture
def cells(monkeypatch):
    """Bake these results cells into the table doctor and C1 read."""

    def bake(*rows):
        data = baked({"cells": list(rows)})
        monkeypatch.setattr(conformance_cells, "_TABLE", data)
        return data

    return bake


def c1(tmp_path, config):
    model = model_dir(tmp_path / "c1", {"config.json": config})
    ctx = Context(ModelDir(str(model)), load_profile(CARD), {}, UserArgs(["--max-model-len", CONTEXT]), {})
    return [f.to_json() for f in C1.check(ctx).findings]


def judge(config, tp=1, quantize=None):
    return conformance_cells.judge(CARD, config, CONTEXT, tp, quantize)


def test_the_field_table_is_read_from_the_model_code():
    # vLLM's Llama refuses an activation other than SiLU and reads the rope fields; the author's
    # reads the MLP bias: each shows up although no one listed it.
    llama = fields("LlamaForCausalLM")
    assert {"hidden_act", "rope_scaling", "rope_theta", "mlp_bias", "num_key_value_heads"} <= set(llama)
    assert "sliding_window" in fields("MistralForCausalLM")
    # Every engine generation has its own table, and the backports are in 0.5.5's.
    engines = conformance_cells.fields_table()["engines"]
    assert set(engines) == {"0.5.5", "0.11.0", "0.32.0"}
    assert "Qwen3_5ForCausalLM" in engines["0.5.5"] and "query_pre_attn_scalar" in engines["0.5.5"]["Gemma3ForCausalLM"]


def test_kernel_sizes_of_other_layers_are_compared_exactly():
    """Gemma 4's full-attention layers' head (global_head_dim) and transformers 5's per-layer
    overrides are sizes a kernel dispatches on, as the model's head size is: exact, whichever
    layers carry them."""
    gemma4 = {"model_type": "gemma4_text", "head_dim": 256, "global_head_dim": 512}
    values = config_values(
        dict(gemma4, per_layer_config={"5": {"head_dim": 512}, "11": {"head_dim": 512, "num_key_value_heads": 1}}),
        ["global_head_dim", "head_dim", "per_layer_config"],
    )
    assert values["global_head_dim"] == values["per_layer_config[].head_dim"] == ["size:512"]
    assert values["head_dim"] == ["num:+"] and values["@head_size"] == ["size:256"]  # the model's own head: @head_size
    assert values["per_layer_config[].num_key_value_heads"] == ["num:+"]


def test_value_classes_keep_categories_and_the_sign_of_numbers():
    assert value_class("silu") == ["str:silu"] and value_class(True) == ["true"] and value_class(None) == ["null"]
    assert value_class(4096) == value_class(1e6) == ["num:+"] and value_class(0) == ["num:0"]
    assert value_class([1.0, 2.5]) == ["list:num"]
    assert value_class(["sliding_attention", "full_attention"]) == ["item:str:full_attention", "item:str:sliding_attention"]


def test_a_value_no_exact_cell_exercised_keeps_the_model_unproven_and_is_named(cells):
    cells(result_cell(MISTRAL, "exact", "mistral"))
    assert judge(MISTRAL) == ("proven", conformance_cells.table()["cards"][CARD]["cells"][0], [])
    # Other widths, eps and theta take the same code path: still proven.
    wider = dict(MISTRAL, hidden_size=4096, intermediate_size=14336, num_attention_heads=64, rms_norm_eps=1e-6, rope_theta=1e6)
    assert judge(wider)[0] == "proven"
    gelu = dict(MISTRAL, hidden_act="gelu")
    assert judge(gelu)[0] == "unproven" and judge(gelu)[2] == ["hidden_act=gelu"]
    dynamic = dict(MISTRAL, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    tokens, _, open_list = judge(dynamic)
    assert tokens == "unproven" and "rope_scaling.rope_type=dynamic" in open_list
    # The sizes a kernel dispatches on are values of their own: head size 32, a rotary dim of 16.
    narrow = dict(MISTRAL, head_dim=32)
    assert "@head_size=32" in judge(narrow)[2] and "@rotary_dim=32" in judge(narrow)[2]
    partial = dict(MISTRAL, partial_rotary_factor=0.25)
    assert "@rotary_dim=16" in judge(partial)[2]


def test_traits_in_a_combination_no_cell_ran_are_judged_one_by_one(cells):
    tied = dict(MISTRAL, tie_word_embeddings=True)
    mqa = dict(MISTRAL, num_key_value_heads=1)
    tied_mqa = dict(mqa, tie_word_embeddings=True)
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(tied, "exact", "mistral-tied"))
    # A trait no exact cell has (one KV head: multi-query) is named, whatever else is covered.
    tokens, cell, open_list = judge(tied_mqa)
    assert tokens == "unproven" and open_list == ["trait kv=mqa"] and cell["variant"] == "mistral-tied"
    # Tied and multi-query each exact, never together: each trait was exercised, the nearest
    # exact cell decides.
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(tied, "exact", "mistral-tied"), result_cell(mqa, "exact", "mistral-mqa"))
    tokens, cell, open_list = judge(tied_mqa)
    assert tokens == "proven" and open_list == [] and cell["variant"] in ("mistral-tied", "mistral-mqa")
    # A trait seen only in a cell that differed does not count as exercised.
    cells(
        result_cell(MISTRAL, "exact", "mistral"),
        result_cell(tied, "differs", "mistral-tied", first_difference=0),
        result_cell(mqa, "exact", "mistral-mqa"),
    )
    assert judge(tied_mqa)[0] != "proven"


def test_a_switched_off_window_is_no_window_where_the_config_class_drops_it(cells):
    # Qwen2's config classes drop sliding_window when use_sliding_window is false (so do the
    # engines): a published Qwen2.5's 131072 under the switch off is no window.
    qwen2 = dict(MISTRAL, architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False)
    cells(result_cell(qwen2, "exact", "qwen2"), result_cell(MISTRAL, "exact", "mistral"))
    published = dict(qwen2, sliding_window=131072)
    assert judge(published)[0] == "proven"
    assert "sliding_window=a positive number" in judge(dict(published, use_sliding_window=True))[2]
    # transformers 5's Mistral reads the window whatever the switch says: it counts as written.
    mistral = dict(MISTRAL, sliding_window=4096, use_sliding_window=False)
    assert "sliding_window=a positive number" in judge(mistral)[2]


def test_the_starts_arguments_and_overrides_are_judged_too(cells, tmp_path):
    cells(result_cell(MISTRAL, "exact", "mistral"))
    model = model_dir(tmp_path / "m", {"config.json": MISTRAL})

    def tokens(*args, dtype=("--dtype", "float32")):
        return tokens_of({"model_dir": str(model), "card": CARD, "user_args": ["--max-model-len", CONTEXT, *dtype, *args]})

    assert tokens()[0] == "proven"
    # Every cell runs float32: `auto` serves this float32 configuration in float16, no cell's.
    assert tokens(dtype=())[2] == ["@dtype=float16"] and tokens(dtype=("--dtype", "bfloat16"))[2] == ["@dtype=bfloat16"]
    # The engine's own rope flags change the configuration it reads, as --hf-overrides does.
    assert tokens("--rope-theta", "5e5")[0] == "proven"  # another theta takes the same code
    assert "rope_scaling.rope_type=dynamic" in tokens("--rope-scaling", '{"rope_type": "dynamic", "factor": 2.0}')[2]
    assert tokens("--quantization", "fp8")[2] == ["@quantization=fp8"]
    assert tokens("--kv-cache-dtype", "fp8")[2] == ["@kv_cache_dtype=fp8"]
    assert tokens("-pp", "2")[2] == ["@pipeline_parallel_size=2"]
    # --hf-overrides replaces the values judged: the engine reads the overridden configuration.
    assert tokens("--hf-overrides", '{"hidden_act": "gelu"}')[2] == ["hidden_act=gelu"]
    assert tokens("--hf-overrides.hidden_act", "gelu")[0] == "unproven"
    # A checkpoint quantized by its own description, whatever names it.
    for extra in ({"compression_config": {"format": "int-quantized"}}, {"quantization_config": {"bits": 4}}):
        assert judge(dict(MISTRAL, **extra))[2] == ["@quantization=unknown"]
    modelopt = model_dir(tmp_path / "modelopt", {"config.json": MISTRAL, "hf_quant_config.json": {"producer": {"name": "modelopt"}}})
    assert tokens_of({"model_dir": str(modelopt), "card": CARD, "user_args": ["--dtype", "float32"]})[2] == ["@quantization=modelopt"]


def test_quantized_checkpoints_and_other_tensor_parallel_sizes_need_cells_of_their_own(cells):
    cells(result_cell(MISTRAL, "exact", "mistral"))
    awq = dict(MISTRAL, quantization_config={"quant_method": "awq", "bits": 4})
    assert "@quantization=awq" in judge(awq)[2]
    # AutoGPTQ's quantize_config.json, which vLLM reads as GPTQ.
    assert judge(MISTRAL, quantize={"bits": 4, "group_size": 128})[2] == ["@quantization=gptq"]
    assert judge(MISTRAL, tp=2)[2] == ["@tensor_parallel_size=2", "no exact cell at --tensor-parallel-size 2 with its sharding (kv split)"]
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(MISTRAL, "exact", "mistral", tp=2))
    assert judge(MISTRAL, tp=2)[0] == "proven"


def test_a_sharded_start_is_proven_only_by_a_cell_of_its_size_and_sharding(cells):
    """At TP > 1 a model's KV heads are split over the ranks or, fewer than the ranks, copied to
    each; its experts are cut across them. Each is its own code path: a value class seen at
    another size or in another sharding proves nothing there."""
    mqa = dict(MISTRAL, num_key_value_heads=1)
    cells(result_cell(MISTRAL, "exact", "mistral", tp=2), result_cell(mqa, "exact", "mistral-mqa"))
    assert judge(MISTRAL, tp=2)[0] == "proven"
    # Every value of the MQA model is covered (one KV head at TP 1, size 2 by the GQA cell), and
    # still no cell copied one KV head to two ranks.
    assert judge(mqa, tp=2)[0::2] == ("unproven", ["no exact cell at --tensor-parallel-size 2 with its sharding (kv replicated)"])
    cells(result_cell(MISTRAL, "exact", "mistral", tp=2), result_cell(mqa, "exact", "mistral-mqa", tp=2))
    assert judge(mqa, tp=2)[0] == "proven"
    assert sharding(MISTRAL, 4) == "kv replicated" and sharding(MISTRAL, 1) is None
    assert sharding(dict(MISTRAL, num_local_experts=8), 2) == "kv split, experts split"
    assert sharding(dict(MISTRAL, num_key_value_heads=3), 2) == "kv 3 over 2 ranks"
    # Gemma 4's full layers with one KV head beside the windowed layers' two: both ways at TP 2.
    assert sharding(dict(MISTRAL, num_global_key_value_heads=1), 2) == "kv split and replicated"
    assert sharding(dict(MISTRAL, num_global_key_value_heads=4), 2) == "kv split"
    assert sharding(dict(MISTRAL, per_layer_config={"1": {"head_dim": 64, "num_key_value_heads": 1}}), 2) == "kv split and replicated"


def test_a_known_difference_fails_the_model_wherever_its_culprit_appears(cells, tmp_path):
    windowed = dict(MISTRAL, sliding_window=64)
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(windowed, "differs", "mistral-window", first_difference=3))
    baked_cell = conformance_cells.table()["cards"][CARD]["cells"][1]
    # The window with what is judged together with it (the cap, the layer pattern): the scores' kernel.
    assert baked_cell["culprit"] == {"window": "all", "softcap": False, "layers": None}
    # Tied embeddings and another window size: no cell has these traits, and still C1 fails it.
    mine = dict(windowed, sliding_window=100, tie_word_embeddings=True)
    [finding] = c1(tmp_path, mine)
    assert finding["code"] == "C1" and finding["severity"] == "error" and "mistral-window" in finding["message"]
    assert judge(mine)[0] == "differs"
    # Without the window the model is not that cell's; it is unproven (its tied head no cell ran).
    assert c1(tmp_path, dict(MISTRAL, tie_word_embeddings=True)) == []
    assert judge(dict(MISTRAL, tie_word_embeddings=True))[0] == "unproven"


def test_a_culprit_is_widened_until_no_exact_cell_shares_it(cells, tmp_path):
    windowed = dict(MISTRAL, sliding_window=64)
    cells(
        result_cell(MISTRAL, "exact", "mistral"),
        result_cell(dict(windowed, tie_word_embeddings=True), "exact", "mistral-window-tied"),
        result_cell(windowed, "differs", "mistral-window"),
    )
    culprit = conformance_cells.table()["cards"][CARD]["cells"][2]["culprit"]
    assert culprit == {"tied": False, "window": "all", "softcap": False, "layers": None}
    # The window alone is no culprit (an exact cell has it tied); window and untied head are.
    assert c1(tmp_path, dict(windowed, tie_word_embeddings=True)) == []
    assert [f["code"] for f in c1(tmp_path, dict(windowed, sliding_window=100))] == ["C1"]


def test_doctor_names_what_stays_open(cells, tmp_path):
    cells(result_cell(MISTRAL, "exact", "mistral"))
    gelu = model_dir(tmp_path / "gelu", {"config.json": dict(MISTRAL, hidden_act="gelu")})
    data = {"model_dir": str(gelu), "card": CARD, "user_args": ["--max-model-len", CONTEXT, "--dtype", "float32", "-tp", "2"]}
    tokens, cell, open_list = tokens_of(data)
    assert tokens == "unproven" and open_list == [
        "@tensor_parallel_size=2",
        "hidden_act=gelu",
        "no exact cell at --tensor-parallel-size 2 with its sharding (kv split)",
    ]
    assert json.dumps(open_list)  # the JSON contract carries it as a list of strings


def test_doctor_many_rows_and_table_carry_what_stays_open(cells, tmp_path):
    cells(result_cell(MISTRAL, "exact", "mistral"))
    gelu = model_dir(tmp_path / "gelu", {"config.json": dict(MISTRAL, hidden_act="gelu", rope_theta=-1.0)})
    data = {"model_dir": str(gelu), "card": CARD, "user_args": ["--max-model-len", CONTEXT, "--dtype", "float32", "-tp", "2"]}
    tokens, _, open_list = tokens_of(data)
    plan = {"verdict": "starts", "repairs": [], "findings": [], "failing": [], "unverified": [], "args": [], "env": {}}
    row = doctor_many.row_of(str(gelu), CARD, dict(plan, tokens=tokens, tokens_open=open_list))
    assert row["tokens"] == "unproven" and row["tokens_open"] == open_list and len(open_list) == 4
    table = doctor_many.markdown({"models": [str(gelu)], "cards": {}, "rows": [row]})
    assert f"| unproven: {open_list[0]}, {open_list[1]} and 2 more |" in table


def test_a_value_that_made_a_cell_fail_is_its_culprit_not_the_traits_it_shares(cells, tmp_path):
    narrow = dict(MISTRAL, hidden_size=128)  # heads 32 wide: the CPU build's kernel crashed on them
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(narrow, "crashed", "mistral-head-32", code="CPU"))
    row = conformance_cells.table()["cards"][CARD]["cells"][1]
    assert "@head_size=size:32" in row["culprit_values"]
    assert judge(dict(narrow, intermediate_size=1024))[1]["variant"] == "mistral-head-32"  # the culprit, other widths
    # Another head size with the same traits is not that cell's: unproven, its size named.
    tokens, _, open_list = judge(dict(MISTRAL, hidden_size=192))
    assert tokens == "unproven" and "@head_size=48" in open_list and c1(tmp_path, dict(MISTRAL, hidden_size=192)) == []
    # A failed cell with the very traits and values of an exact one tells nothing: it fails no one.
    cells(result_cell(MISTRAL, "exact", "mistral"), result_cell(MISTRAL, "crashed", "mistral-again", code="CPU"))
    assert conformance_cells.table()["cards"][CARD]["cells"][1].get("unattributed") is True
    assert judge(MISTRAL)[0] == "proven" and c1(tmp_path, MISTRAL) == []
    # Whichever the table lists first: the exact twin decides.
    cells(result_cell(MISTRAL, "crashed", "mistral-again", code="CPU"), result_cell(MISTRAL, "exact", "mistral"))
    assert judge(MISTRAL)[:2] == ("proven", conformance_cells.table()["cards"][CARD]["cells"][1])
    # A failed cell alone with the model's traits and nothing unseen: unproven, and said why.
    cells(result_cell(MISTRAL, "crashed", "mistral-again", code="CPU"))
    assert judge(MISTRAL)[0::2] == ("unproven", ["its cell mistral-again (saved by 4.57.6) was crashed"])


def test_rope_fields_under_either_generations_names_are_judged():
    # vLLM 0.32's table names rope_parameters (transformers 5); a 4.x config writes rope_scaling.
    legacy = dict(MISTRAL, rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    values = config_values(legacy, ["rope_parameters"])
    assert values["rope_scaling.rope_type"] == ["str:dynamic"] and values["rope_theta"] == ["num:+"]


def test_odd_values_are_classed_and_said_as_they_are():
    assert value_class(float("nan")) == ["num:nan"]
    blocks = {"block_configs": [{"attention": {"n_heads_in_group": 8}}, {"attention": {"no_op": True}}]}
    assert config_values(blocks, ["block_configs"])["block_configs[].attention.no_op"] == ["true"]
    assert uncovered({"rope_scaling.factor": ["str:8"], "x": ["num:nan"]}, {}) == ['rope_scaling.factor="8"', "x=NaN"]
