"""R13: the names vLLM 0.11's model code reads that a saved config does not carry, stated R5's way.

The configs are real saves: each family's config class, saved by the author venv's transformers 5
and by the dev venv's 4.57 (nv-a100's engine transformers), and read back by that 4.57 as the
engine reads them: without the repair each lacks the name (the engine's model build stops on it:
tests/e2e/test_model_build_vs_engine.py), with the repair's --hf-overrides laid over it as vLLM
lays them (`config.update`), or its rewritten config.json, each has the value its author's code
computes with."""

import json
import subprocess
import sys

import pytest

from common.rules.r13_config_names import engine_names, missing, stated_value
from common.triage import triage_file

from common.tests.helpers import ROOT, launch, model_dir, preflight_json

AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"  # transformers 5.x
SAVERS = {"v5": AUTHOR_PYTHON, "457": sys.executable}  # .venv: transformers 4.57, nv-a100's
SMALL = "hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128"
# name -> (the expression that builds the config, the class it is saved as, the names R13 states
# with their values: what the author's code computes with).
FAMILIES = {
    "gemma2": (f"Gemma2Config({SMALL}, head_dim=16)", "Gemma2ForCausalLM", {"hidden_act": "gelu_pytorch_tanh"}),
    "deepseek_v2": (
        f"DeepseekV2Config({SMALL}, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, kv_lora_rank=16, "
        "q_lora_rank=None, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, n_group=1, topk_group=1)",
        "DeepseekV2ForCausalLM",
        {"moe_layer_freq": 1, "scoring_func": "softmax"},
    ),
    "glm4_moe": (
        f"Glm4MoeConfig({SMALL}, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)",
        "Glm4MoeForCausalLM",
        {"head_dim": 16},
    ),
    "lfm2": (f"Lfm2Config({SMALL})", "Lfm2ForCausalLM", {"conv_dim": 64, "block_dim": 64, "block_ff_dim": 128}),
    "modernbert": (f"ModernBertConfig({SMALL}, norm_eps=2e-5)", "ModernBertModel", {"layer_norm_eps": 2e-5}),
}
SAVE = """
import json, os, sys, transformers
for name, (expr, arch) in json.loads(sys.argv[1]).items():
    config = eval(expr, {expr.split("(")[0]: getattr(transformers, expr.split("(")[0])})
    config.architectures = [arch]
    config.save_pretrained(os.path.join(sys.argv[2], name))
"""
# The engine's reading: AutoConfig, then the repair's --hf-overrides as vLLM applies them.
READ = """
import json, sys
from transformers import AutoConfig
out = []
for path, overrides, names in json.loads(sys.argv[1]):
    config = AutoConfig.from_pretrained(path)
    config.update(overrides)
    text = config.get_text_config()
    out.append({n: getattr(text, n, "<missing>") for n in names})
print(json.dumps(out))
"""


def _run(python, code, *args):
    proc = subprocess.run([str(python), "-c", code, *args], capture_output=True, text=True, timeout=300, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(saver, family) -> the config directory that saver's transformers writes."""
    if not AUTHOR_PYTHON.exists():
        pytest.skip("needs .venv-author (transformers 5): run `make author-env`")
    out = {}
    for saver, python in SAVERS.items():
        base = tmp_path_factory.mktemp(f"saved-{saver}")
        _run(python, SAVE, json.dumps({name: [expr, arch] for name, (expr, arch, _) in FAMILIES.items()}), str(base))
        out.update({(saver, name): base / name for name in FAMILIES})
    return out


def read_by_engine(jobs):
    """What the engine's transformers (4.57, this venv's) reads of each (path, overrides, names)."""
    return json.loads(_run(sys.executable, READ, json.dumps([[str(p), o, n] for p, o, n in jobs])))


def r13(plan):
    return [r for r in plan["repairs"] if r["code"] == "R13"]


def overrides(plan):
    args = plan["args"] + plan["user_args"]
    return json.loads(args[args.index("--hf-overrides") + 1]) if "--hf-overrides" in args else {}


@pytest.mark.parametrize("saver", sorted(SAVERS))
def test_each_family_saved_by_either_transformers_gets_what_its_engine_reads(saved, saver, env_for_tests):
    plans, jobs = {}, []
    for name, (_, _, wanted) in FAMILIES.items():
        path = saved[saver, name]
        assert not set(wanted) & set(json.loads((path / "config.json").read_text())), "the saver writes the name itself"
        plans[name] = plan = preflight_json(path, env=env_for_tests)
        [repair] = r13(plan)
        assert repair["verified"] is True and "vLLM 0.11.0" in repair["detail"], repair
        assert {k: overrides(plan)[k] for k in wanted} == wanted, plan["args"]
        jobs += [(path, {}, sorted(wanted)), (path, overrides(plan), sorted(wanted))]
    read = iter(read_by_engine(jobs))
    for name, (_, _, wanted) in FAMILIES.items():
        bare, repaired = next(read), next(read)
        assert set(bare.values()) == {"<missing>"}, (name, bare)  # what the engine's model build stops on
        assert repaired == wanted, (name, repaired)


def test_a_nested_gemma2_is_given_whole_and_read_by_the_engines_transformers(saved, env_for_tests, tmp_path):
    """PaliGemma 2: a Gemma 2 text_config, which --hf-overrides would replace wholesale."""
    outer = json.loads((saved["v5", "gemma2"] / "config.json").read_text())
    config = {"architectures": ["PaliGemmaForConditionalGeneration"], "model_type": "paligemma", "text_config": outer}
    path = model_dir(tmp_path / "pg", {"config.json": config})
    plan = preflight_json(path, env=env_for_tests)
    [repair] = r13(plan)
    assert "text_config.hidden_act" in repair["detail"] and repair["verified"] is True, repair
    assert "--hf-config-path" in plan["args"] and "hidden_act" not in overrides(plan), plan["args"]
    rewritten = plan["args"][plan["args"].index("--hf-config-path") + 1]
    [read] = read_by_engine([(rewritten, {}, ["hidden_act", "hidden_activation", "rope_theta"])])
    # R5's edit of the same text_config is kept beside R13's.
    assert read == {"hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "rope_theta": 10000.0}, read


def test_users_hf_overrides_win_and_are_merged(saved, env_for_tests, fake_vllm):
    _, called = fake_vllm
    user = ["--hf-overrides", '{"hidden_act": "gelu_pytorch_tanh", "max_position_embeddings": 300}']
    assert launch(env_for_tests, saved["v5", "gemma2"], user).returncode == 0
    argv = called()["argv"]
    assert argv.count("--hf-overrides") == 1
    given = json.loads(argv[argv.index("--hf-overrides") + 1])
    assert given["hidden_act"] == "gelu_pytorch_tanh" and given["max_position_embeddings"] == 300, given


# ---- from config.json alone ----------------------------------------------------------------


def gemma2(**extra):
    return dict({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_activation": "gelu_pytorch_tanh"}, **extra)


@pytest.mark.parametrize("card", ["iluvatar-bi100", "nv-a100@next"])
def test_engines_the_table_does_not_list_get_nothing(tmp_path, env_for_tests, card):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": gemma2()}), card=card, env=env_for_tests)
    assert r13(plan) == [] and not [f for f in plan["findings"] if f["code"] == "R13"], plan


def test_a_config_that_carries_the_name_gets_nothing(tmp_path, env_for_tests):
    """Google's own Gemma 2 config.json carries hidden_act beside hidden_activation."""
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": gemma2(hidden_act="gelu_pytorch_tanh")}), env=env_for_tests)
    assert r13(plan) == [] and "hidden_act" not in overrides(plan)


@pytest.mark.parametrize("activation", [None, ["gelu"], {"x": 1}, float("nan")])
def test_a_carrier_without_a_plain_value_states_nothing_and_says_so(tmp_path, env_for_tests, activation):
    config = gemma2()
    if activation is None:
        del config["hidden_activation"]
    else:
        config["hidden_activation"] = activation
    path = model_dir(tmp_path / "m", {"config.json": json.dumps(config)})
    plan = preflight_json(path, env=env_for_tests)
    assert r13(plan) == [] and "hidden_act" not in overrides(plan)
    [finding] = [f for f in plan["findings"] if f["code"] == "R13"]
    assert finding["severity"] == "warning" and "hidden_act" in finding["message"], finding


def test_the_carriers_state_a_key_a_constant_or_a_quotient():
    assert stated_value({"norm_eps": 1e-6}, {"key": "norm_eps"}) == 1e-6
    assert stated_value({}, {"value": "softmax"}) == "softmax"
    assert stated_value({"hidden_size": 4096, "num_attention_heads": 32}, {"quotient": ["hidden_size", "num_attention_heads"]}) == 128
    assert stated_value({"hidden_size": 100, "num_attention_heads": 3}, {"quotient": ["hidden_size", "num_attention_heads"]}) is None
    assert stated_value({"hidden_size": True, "num_attention_heads": 1}, {"quotient": ["hidden_size", "num_attention_heads"]}) is None
    assert missing({"hidden_act": "gelu"}, {"names": {"hidden_act": {"key": "hidden_activation"}}}) == ({}, [])


def test_the_table_lists_vllm_011s_names():
    """What compat_build.config_names found on vLLM 0.11.0 (both savers alike)."""
    names = {t: sorted(e["names"]) for t, e in engine_names("0.11.0").items()}
    assert names == {
        "deepseek_v2": ["moe_layer_freq", "scoring_func"],
        "gemma2": ["hidden_act"],
        "glm4_moe": ["head_dim"],
        "lfm2": ["block_dim", "block_ff_dim", "conv_dim"],
        "modernbert": ["layer_norm_eps"],
    }
    assert engine_names("0.5.5") == {} and engine_names("0.32.0") == {}


@pytest.mark.parametrize(
    "line, code",
    [
        ("AttributeError: 'Gemma2Config' object has no attribute 'hidden_act'", "R13"),
        ("AttributeError: 'DeepseekV2Config' object has no attribute 'moe_layer_freq'", "R13"),
        ("AttributeError: 'LlamaConfig' object has no attribute 'hidden_act'", "MB"),
    ],
)
def test_triage_names_r13_for_the_names_it_states(tmp_path, line, code):
    log = tmp_path / "pod.log"
    log.write_text(f"INFO starting\nTraceback (most recent call last):\n{line}\n")
    assert triage_file(str(log)).code == code
