"""What doctor and the preflight make of the conformance matrix: the traits that match a model to a
cell, C1's findings for cells that were not exact, and `tokens` in doctor's answer."""

import pytest

from common.engine import conformance_cells
from common.model.config_traits import config_traits
from common.model.modeldir import ModelDir
from common.engine.profile import load_profile
from common.rules.support.base import Context
from common.rules.c1_conformance import RULE
from common.engine.vllm_args import UserArgs

from common.tests.helpers import model_dir, run_common

LLAMA31 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 131072,
    "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": False,
    "transformers_version": "4.43.0",
}
GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "hidden_size": 2304,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "max_position_embeddings": 8192,
    "sliding_window": 4096,
    "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
    "transformers_version": "4.42.0",
}


def test_traits_read_the_configuration_that_decides_the_computation():
    llama = config_traits(LLAMA31)
    assert llama["rope"] == "llama3" and llama["kv"] == "gqa" and llama["tied"] is False and llama["window"] == "none"
    assert llama["head_dim"] == "derived" and llama["partial_rotary"] is False and llama["experts"] is None
    # A window counts only when it is shorter than the context the model is served with.
    assert config_traits(GEMMA2)["window"] == "interleaved"
    assert config_traits(GEMMA2, "4096")["window"] == "none"
    assert config_traits(GEMMA2)["softcap"] is True and config_traits(GEMMA2)["head_dim"] == "explicit"
    # transformers 5's forms read as their 4.x forms do.
    v5 = dict(LLAMA31, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0}, transformers_version="5.2.0")
    del v5["rope_scaling"]
    assert config_traits(v5) == llama
    neox = {"architectures": ["GPTNeoXForCausalLM"], "hidden_size": 512, "num_attention_heads": 8, "rotary_pct": 0.25}
    assert config_traits(neox)["partial_rotary"] is True
    assert config_traits({"n_embd": 256, "n_head": 4, "multi_query": True})["kv"] == "mqa"
    moe = config_traits(dict(LLAMA31, num_experts=64, shared_expert_intermediate_size=512, norm_topk_prob=False))
    assert moe["experts"] == {"shared": True, "norm_topk_prob": False}


DEEPSEEK = {"model_type": "deepseek_v2", "n_routed_experts": 64, "num_hidden_layers": 27, "first_k_dense_replace": 1, "moe_layer_freq": 1}
QWEN_MOE = {"model_type": "qwen3_moe", "num_experts": 128, "num_hidden_layers": 48, "decoder_sparse_step": 1, "mlp_only_layers": []}
QWEN2_WINDOW = {"model_type": "qwen2", "num_hidden_layers": 28, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 28}


@pytest.mark.parametrize(
    "config, context, pattern",
    [
        (DEEPSEEK, None, ["dense", "moe"]),
        (dict(DEEPSEEK, first_k_dense_replace=64), None, ["dense"]),  # a count past the layers: no MoE layer
        (dict(DEEPSEEK, first_k_dense_replace=0, moe_layer_freq=2), None, ["dense", "moe"]),
        (QWEN_MOE, None, ["moe"]),
        (dict(QWEN_MOE, decoder_sparse_step=2), None, ["dense", "moe"]),
        (dict(QWEN_MOE, mlp_only_layers=list(range(48))), None, ["dense"]),
        (dict(QWEN_MOE, num_hidden_layers=None), None, ["unknown"]),
        (QWEN2_WINDOW, "8192", ["full"]),  # the window only from layer 28 on: on none of 28
        (dict(QWEN2_WINDOW, max_window_layers=14), "8192", ["full", "window"]),
        (dict(QWEN2_WINDOW, max_window_layers=0), "8192", ["window"]),
        (dict(QWEN2_WINDOW, max_window_layers=14), "4096", None),  # the window never bites
        (LLAMA31, None, None),
    ],
)
def test_the_layer_pattern_is_the_kinds_of_layer_the_counts_make(config, context, pattern):
    assert config_traits(config, context)["layers"] == pattern


def test_a_layer_pattern_no_cell_ran_is_judged_with_the_window_and_named():
    """Qwen3-MoE with every layer dense (mlp_only_layers): the experts never run, a pattern no
    cell of its architecture ran; doctor names it with the traits judged together with it."""
    from conformance.cases import load_cases
    from conformance.models import ensure, model_dir as saved

    import json

    [spec] = [c for c in load_cases() if c["name"] == "qwen3-moe"]
    ensure([spec], ["v5"])
    config = json.loads((saved(spec, "v5") / "model" / "config.json").read_text())
    assert config_traits(config, "256")["layers"] == ["moe"]
    dense = dict(config, mlp_only_layers=list(range(config["num_hidden_layers"])))
    tokens, _, open_list = conformance_cells.judge("nv-a100", config, "256")
    assert tokens == "proven", open_list
    tokens, _, open_list = conformance_cells.judge("nv-a100", dense, "256")
    assert tokens == "unproven" and "traits window=none, softcap=False, layers=['dense'] together" in open_list, open_list


def cell(result, traits, saver="legacy", **extra):
    return dict(architecture="Gemma2ForCausalLM", variant="gemma2", saved_by="4.55.4", saver=saver, traits=traits, result=result, **extra)


@pytest.fixture
def table(monkeypatch):
    """The baked cells, replaced by the test's own."""
    data = {"cards": {}}
    monkeypatch.setattr(conformance_cells, "_TABLE", data)
    return data


def c1(tmp_path, card, config, args=()):
    model = model_dir(tmp_path / "m", {"config.json": config})
    ctx = Context(ModelDir(str(model)), load_profile(card), {}, UserArgs(list(args)), {})
    return [f.to_json() for f in RULE.check(ctx).findings]


def test_a_differing_cell_fails_the_model_with_c1(tmp_path, table):
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("differs", config_traits(GEMMA2), first_difference=6)]}
    [finding] = c1(tmp_path, "iluvatar-bi100", GEMMA2)
    assert finding["code"] == "C1" and finding["severity"] == "error"
    assert "computes this configuration differently" in finding["message"] and "from generated token 7" in finding["message"]
    # Another card, another configuration (served within its window), another saver: not covered.
    assert c1(tmp_path, "nv-a100", GEMMA2) == []
    assert c1(tmp_path, "iluvatar-bi100", GEMMA2, ["--max-model-len", "4096"]) == []
    assert c1(tmp_path, "iluvatar-bi100", dict(GEMMA2, transformers_version="5.3.0")) == []


def test_a_cell_the_cpu_build_could_not_run_is_unverified_and_a_refusal_of_another_rule_is_left_to_it(tmp_path, table):
    traits = config_traits(GEMMA2)
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("crashed", traits, code="CPU", cause="NotImplementedError: no MoE on the CPU")]}
    [finding] = c1(tmp_path, "iluvatar-bi100", GEMMA2)
    assert finding["severity"] == "unverified" and "CPU build" in finding["message"] and "no MoE on the CPU" in finding["message"]
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("crashed", traits, signal="SIGSEGV")]}
    assert [f["severity"] for f in c1(tmp_path, "iluvatar-bi100", GEMMA2)] == ["unverified"]
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("refused", traits, code="CTX")]}
    assert c1(tmp_path, "iluvatar-bi100", GEMMA2) == []  # CTX says it, with its own fix
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("refused", traits, cause="KeyError: 'k_layernorm'")]}
    [finding] = c1(tmp_path, "iluvatar-bi100", GEMMA2)
    assert finding["severity"] == "error" and "KeyError" in finding["message"]
    table["cards"]["iluvatar-bi100"] = {"cells": [cell("exact", traits)]}
    assert c1(tmp_path, "iluvatar-bi100", GEMMA2) == []


def test_doctor_reports_tokens_from_the_committed_cells(tmp_path):
    """The committed table: a model the matrix covers on a card is `proven` there (or `differs`);
    one it does not cover is `unproven`, and the verdict stays the metadata layer's."""
    import json

    cells = conformance_cells.table()["cards"]
    exact = next(c for c in cells["nv-a100"]["cells"] if c["result"] == "exact" and c["saver"] == "legacy")
    case = exact["variant"]
    from conformance.cases import load_cases
    from conformance.models import ensure
    from conformance.models import model_dir as saved

    [spec] = [c for c in load_cases() if c["name"] == case]
    ensure([spec], ["v5", "457"])  # the case's model, as the matrix made it (cached)
    path = saved(spec, "457") / "model"
    proc = run_common(["doctor", str(path), "--card", "nv-a100", "--json", "--", "--dtype", "float32", "--max-model-len", "256"])
    data = json.loads(proc.stdout)
    assert data["tokens"] == "proven" and data["tokens_cell"].startswith(case), data
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["SomeoneElsesForCausalLM"]
    other = model_dir(tmp_path / "other", {"config.json": config})
    data = json.loads(run_common(["doctor", str(other), "--card", "nv-a100", "--json"]).stdout)
    assert data["tokens"] == "unproven" and data["tokens_cell"] is None


@pytest.mark.parametrize(
    "line, code",
    [
        # vLLM 0.5.5's refusal, then 0.11's: CTX.
        (
            "ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len "
            "(max_position_embeddings=2048 or model_max_length=None in model's config.json). This may lead to "
            "incorrect model outputs or CUDA errors. To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
            "CTX",
        ),
        (
            "ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len "
            "(max_position_embeddings=2048 or model_max_length=None in model's config.json). To allow overriding "
            "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be "
            "used with extreme caution.",
            "CTX",
        ),
        # The warning the same text makes under VLLM_ALLOW_LONG_MAX_MODEL_LEN=1: the engine goes on.
        (
            "WARNING config.py:1682] User-specified max_model_len (4096) is greater than the derived max_model_len "
            "(max_position_embeddings=2048 or model_max_length=None in model's config.json). This may lead to "
            "incorrect model outputs or CUDA errors. Make sure the value is correct and within the model context size.",
            None,
        ),
    ],
)
def test_triage_names_ctx_for_the_refusal_not_for_the_warning(tmp_path, line, code):
    from common.triage import triage_file

    log = tmp_path / "engine.log"
    log.write_text(f"INFO starting\n{line}\n")
    got = triage_file(str(log)).code
    assert got == code if code else got != "CTX"


def test_doctor_judges_tokens_at_the_platforms_tensor_parallel_size():
    """A sharded start is proven only where a cell ran at its size: the BI-100's Qwen3 backport
    at TP 2 by its TP 2 cell; at TP 4, which no cell ran, unproven and saying so; and beside it
    the smallest size memory says holds the model (1 for a tiny one), judged there too."""
    import json

    from conformance.cases import load_cases
    from conformance.models import ensure
    from conformance.models import model_dir as saved

    [spec] = [c for c in load_cases() if c["name"] == "qwen3"]
    ensure([spec], ["v5"])
    path = saved(spec, "v5") / "model"

    def doctor(tp):
        args = ["--dtype", "float32", "--max-model-len", "256", "--tensor-parallel-size", str(tp)]
        return json.loads(run_common(["doctor", str(path), "--card", "iluvatar-bi100", "--json", "--", *args]).stdout)

    sharded = doctor(2)
    assert sharded["tokens_tp"] == 2 and sharded["tokens"] == "proven", sharded["tokens_open"]
    assert sharded["tokens_cell"].startswith("qwen3 (5.") and sharded["tokens_cell"].endswith(", TP 2)")
    smallest = sharded["tokens_at_smallest_tp"]
    assert smallest["tp"] == 1 and smallest["tokens"] == "proven" and "TP" not in smallest["cell"], smallest
    unrun = doctor(4)
    assert unrun["tokens_tp"] == 4 and unrun["tokens"] == "unproven"
    # The size no cell ran, and so no cell that cut the model's heads over four ranks.
    assert unrun["tokens_open"][0] == "@tensor_parallel_size=4", unrun["tokens_open"]
    assert unrun["tokens_open"][1].startswith("no exact cell at --tensor-parallel-size 4 with its sharding (kv "), unrun["tokens_open"]
    assert len(unrun["tokens_open"]) == 2, unrun["tokens_open"]
