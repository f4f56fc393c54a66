"""R12: config classes the engine's transformers lacks (Gemma 4, Ministral 3, Qwen3.5 on
transformers 4.55), registered from the image's compat_configs before vLLM reads config.json.

The classes are held to transformers 5's own: a config saved by the author venv's transformers
5 reads, in the BI-100 engine's Python (3.10, transformers 4.55) with the repair's environment,
with the same values the engine needs."""

import json
import os
import subprocess

import pytest

from common.model.config_types import model_types
from common.vllm_plugin import compat_configs

from common.tests.helpers import ROOT, model_dir, preflight_json, run_common

AUTHOR_PYTHON = ROOT / ".venv-author" / "bin" / "python"  # transformers 5.x: how configs are saved
ENGINE055_PYTHON = ROOT / ".venv-engine055" / "bin" / "python"  # iluvatar-bi100: vLLM 0.5.5, transformers 4.55
PLUGIN_DIR = ROOT / "common" / "vllm_plugin"
needs_venvs = pytest.mark.skipif(
    not (AUTHOR_PYTHON.exists() and ENGINE055_PYTHON.exists()),
    reason="needs .venv-author (transformers 5) and .venv-engine055 (transformers 4.55): run `make author-env engine055-env`",
)

SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 128,
}
# name -> the transformers 5 expression that builds the config (SMALL in scope).
SAVED_BY_5 = {
    "gemma4_text": "Gemma4TextConfig(**SMALL, sliding_window=128, tie_word_embeddings=False)",
    "gemma4": "Gemma4Config(text_config=dict(SMALL, num_hidden_layers=12))",
    "ministral3": "Ministral3Config(**SMALL, sliding_window=4096)",
    "qwen3_5_text": "Qwen3_5TextConfig(**SMALL)",
    "qwen3_5": "Qwen3_5Config(text_config=dict(SMALL, num_hidden_layers=8))",
    "qwen3_5_moe_text": "Qwen3_5MoeTextConfig(**SMALL, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32)",
    "qwen3_5_moe": "Qwen3_5MoeConfig(text_config=dict(SMALL, num_hidden_layers=8, num_experts=8))",
    # Ministral 3's published form: a Mistral3 wrapper (4.55 has it) around a ministral3 text config.
    "mistral3+ministral3": "Mistral3Config(text_config=Ministral3Config(**SMALL))",
}
FIELDS = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "layer_types",
    "sliding_window",
    "vocab_size",
    "tie_word_embeddings",
    "rope_parameters",
    # The MoE's expert block ("<missing>" on both sides for the dense types).
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)

# Run in each venv: read each saved config, print the text config's fields as JSON, or the error
# that refused it. rope_theta is the one the full-attention layers use (transformers 5 keeps it in
# rope_parameters; the class here must also state it as 4.x's `rope_theta`, which the engine reads).
READ = """
import json, sys
from transformers import AutoConfig

def read(path, fields):
    config = AutoConfig.from_pretrained(path)
    text = config.get_text_config()
    # 5.x's Gemma 4 guards head_dim as per-layer (full layers are wider): the global value is asked for.
    text.allow_global_per_layer_attribute_access = True
    out = {"class": type(config).__name__, "text_model_type": text.model_type}
    for name in fields:
        out[name] = getattr(text, name, "<missing>")
    rope = text.rope_parameters
    out["theta_5x"] = (rope.get("full_attention") or rope)["rope_theta"]
    out["rope_theta"] = getattr(text, "rope_theta", "<missing>")
    out["tie_word_embeddings"] = getattr(config, "tie_word_embeddings", None) if text is not config else out["tie_word_embeddings"]
    return out

answers = {}
for path in json.loads(sys.argv[1]):
    try:
        answers[path] = read(path, sys.argv[2].split(","))
    except Exception as exc:
        answers[path] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(answers, default=str))
"""
CLASSES_5 = (
    "Gemma4Config,Gemma4TextConfig,Ministral3Config,Mistral3Config,Qwen3_5Config,Qwen3_5TextConfig,Qwen3_5MoeConfig,Qwen3_5MoeTextConfig"
)


def _run(python, args, env=None):
    proc = subprocess.run([str(python), *args], capture_output=True, text=True, timeout=180, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _read(python, paths, fields, env=None):
    answers = _run(python, ["-c", READ, json.dumps([str(p) for p in paths]), ",".join(fields)], env)
    return [answers[str(p)] for p in paths]


@pytest.fixture(scope="module")
def saved_by_5(tmp_path_factory):
    """name -> (the config directory transformers 5 writes for SAVED_BY_5[name], its values as
    transformers 5 reads them): one author process saves them all, one more reads them."""
    if not AUTHOR_PYTHON.exists():
        pytest.skip("needs .venv-author")
    base = tmp_path_factory.mktemp("saved-by-5")
    build = (
        "import json, os, transformers, sys; ns = {n: getattr(transformers, n) for n in sys.argv[3].split(',')}; "
        f"ns['SMALL'] = {SMALL!r}; "
        "[eval(expr, ns).save_pretrained(os.path.join(sys.argv[2], name)) for name, expr in json.loads(sys.argv[1]).items()]; "
        "print('{}')"
    )
    _run(AUTHOR_PYTHON, ["-c", build, json.dumps(SAVED_BY_5), str(base), CLASSES_5])
    names = sorted(SAVED_BY_5)
    paths = [base / name for name in names]
    return dict(zip(names, zip(paths, _read(AUTHOR_PYTHON, paths, FIELDS), strict=True), strict=True))


@pytest.fixture(scope="module")
def read_by_bi100(saved_by_5):
    """name -> (what the BI-100 engine's Python makes of the config without the repair's
    environment, and with it: the plugin dir first on PYTHONPATH, COMPAT_CONFIGS naming the types,
    so that sitecustomize registers the classes). One process each way for all the configs: the
    repaired one registers every config's types, which the classes of one type never read."""
    names = sorted(saved_by_5)
    paths = [saved_by_5[name][0] for name in names]
    types = sorted({t for p in paths for _, t in model_types(json.loads((p / "config.json").read_text())) if t in compat_configs.CLASSES})
    bare = _read(ENGINE055_PYTHON, paths, ("hidden_size",), {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    repaired = _read(ENGINE055_PYTHON, paths, FIELDS, dict(os.environ, PYTHONPATH=str(PLUGIN_DIR), COMPAT_CONFIGS=",".join(types)))
    return dict(zip(names, zip(bare, repaired, strict=True), strict=True))


@needs_venvs
@pytest.mark.parametrize("name", sorted(SAVED_BY_5))
def test_a_config_saved_by_transformers_5_reads_the_same_in_the_bi100_engine(saved_by_5, read_by_bi100, name):
    path, want = saved_by_5[name]
    config = json.loads((path / "config.json").read_text())
    types = [t for _, t in model_types(config) if t in compat_configs.CLASSES]
    assert types, f"{name}: no class here for {model_types(config)}"
    refused, got = read_by_bi100[name]
    # Without the repair's environment, 4.55 refuses the type (what R12 is for).
    assert "error" in refused and any(t in refused["error"] for t in types), refused
    assert "error" not in got, got
    for field in FIELDS + ("class", "text_model_type", "theta_5x"):
        if field == "sliding_window" and want[field] == "<missing>":
            continue  # 5.x's Qwen3.5 has no such field; ours need not either
        assert got[field] == want[field], f"{name}.{field}: 4.55 reads {got[field]!r}, transformers 5 {want[field]!r}"
    assert got["rope_theta"] == want["theta_5x"], f"{name}: rope_theta {got['rope_theta']!r}"


@needs_venvs
def test_a_transformers_that_has_the_classes_keeps_its_own():
    """register() never replaces a class the running transformers has (5.x has all of them)."""
    code = f"import sys; sys.path.insert(0, {str(PLUGIN_DIR)!r}); import compat_configs as c; print(c.register(sorted(c.CLASSES)))"
    assert _run(AUTHOR_PYTHON, ["-c", code]) == []


QWEN3_5 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": dict(SMALL, model_type="qwen3_5_text"),
    "vision_config": {"model_type": "qwen3_5_vision", "depth": 2},
    "tie_word_embeddings": False,
}


def codes(plan, code):
    return [r for r in plan["repairs"] if r["code"] == code], [f for f in plan["findings"] if f["code"] == code]


@pytest.fixture
def env(env_for_tests):
    env_for_tests["COMPAT_SKIP"] = "R2,C1"
    return env_for_tests


def test_bi100_registers_the_classes_and_config_passes(tmp_path, env):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": QWEN3_5}), "iluvatar-bi100", env=env)
    [r12], [] = codes(plan, "R12")
    assert r12["env"][compat_configs.ENV] == "qwen3_5,qwen3_5_text"
    assert plan["env"][compat_configs.ENV] == "qwen3_5,qwen3_5_text" and plan["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(PLUGIN_DIR)
    assert codes(plan, "CONFIG") == ([], [])
    # Reading the config is not serving the model: vLLM 0.5.5 lacks the architecture, which the
    # image's backport serves (R10), not R4's error.
    assert [r["code"] for r in plan["repairs"]].count("R10") == 1 and codes(plan, "R4") == ([], []), plan


def test_a_newer_engine_whose_transformers_knows_the_types_gets_no_r12(tmp_path, env):
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": QWEN3_5}), "nv-a100@next", env=env)
    assert codes(plan, "R12") == ([], []) and codes(plan, "CONFIG") == ([], [])
    assert compat_configs.ENV not in plan["env"]


def test_skipping_r12_leaves_config_to_say_the_engine_is_too_old(tmp_path, env):
    env["COMPAT_SKIP"] += ",R12"
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": QWEN3_5}), "iluvatar-bi100", env=env)
    [config] = codes(plan, "CONFIG")[1]
    assert config["severity"] == "error" and "qwen3_5" in config["message"]


def test_a_type_without_a_class_here_is_left_to_config(tmp_path, env):
    glm = {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "hidden_size": 64, "num_attention_heads": 4}
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": glm}), "iluvatar-bi100", env=env)
    assert codes(plan, "R12") == ([], []) and codes(plan, "CONFIG")[1]


@needs_venvs
def test_doctor_on_bi100_reads_the_config_with_the_registered_classes(tmp_path, env, saved_by_5):
    """doctor's engine-Python AutoConfig check registers R12's classes first, as the engine does."""
    path, _ = saved_by_5["qwen3_5"]
    config = dict(json.loads((path / "config.json").read_text()), architectures=["Qwen3_5ForConditionalGeneration"])
    model = model_dir(tmp_path / "m", {"config.json": config})
    result = run_common(["doctor", str(model), "--card", "iluvatar-bi100", "--json"], dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON)))
    data = json.loads(result.stdout)
    assert [r["code"] for r in data["repairs"]].count("R12") == 1, data["repairs"]
    assert not [f for f in data["findings"] if f["code"] == "CONFIG"], data["findings"]
    assert data["verdict"] == "starts" and {"R12", "R10"} <= {r["code"] for r in data["repairs"]}, data


@needs_venvs
def test_r5_in_the_nested_text_config_of_an_r12_type_verifies_with_the_registered_class(tmp_path, env, saved_by_5):
    """Ministral 3 as published (a mistral3 wrapper around a ministral3 text_config) saved by
    transformers 5: R5's rewritten config.json (the text_config's rope) is read by the engine's
    AutoConfig with R12's classes registered first, as the engine's process reads it; the
    backport (R10) serves the wrapper as text."""
    path, _ = saved_by_5["mistral3+ministral3"]
    config = dict(json.loads((path / "config.json").read_text()), architectures=["Mistral3ForConditionalGeneration"])
    model = model_dir(tmp_path / "m", {"config.json": config})
    result = run_common(["doctor", str(model), "--card", "iluvatar-bi100", "--json"], dict(env, COMPAT_ENGINE_PYTHON=str(ENGINE055_PYTHON)))
    data = json.loads(result.stdout)
    repairs = {r["code"]: r for r in data["repairs"]}
    assert {"R12", "R5", "R10"} <= set(repairs) and all(repairs[c]["verified"] is True for c in ("R5", "R10")), data["repairs"]
    assert data["verdict"] == "starts", data["findings"]


@pytest.mark.parametrize("model_type", ["gemma4", "qwen3_5_text", "glm_moe_dsa"])
def test_triage_leaves_the_refusal_of_an_unknown_type_to_config(model_type):
    """A log of the refusal names CONFIG (a newer engine), with or without a class here: the class
    alone starts none of these models on the engines here."""
    code = "CONFIG"
    from common.triage import scan, signatures

    line = f"ValueError: The checkpoint you are trying to load has model type `{model_type}` but Transformers does not recognize this architecture."
    found = scan([line.encode() + b"\n"], signatures())
    assert found is not None and found[0].code == code


def test_the_plugin_sitecustomize_costs_nothing_unasked_and_runs_the_one_it_shadows(tmp_path):
    """Every Python the engine starts gets the plugin dir on PYTHONPATH: without COMPAT_CONFIGS
    it imports nothing, and the image's own sitecustomize (next on the path) still runs."""
    import sys

    (tmp_path / "sitecustomize.py").write_text("import os\nos.environ['COMPAT_TEST_CHAINED'] = 'yes'\n")
    env = {k: v for k, v in os.environ.items() if k != compat_configs.ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(PLUGIN_DIR), str(tmp_path)])
    code = "import json, os, sys; print(json.dumps([os.environ.get('COMPAT_TEST_CHAINED'), 'transformers' in sys.modules]))"
    assert _run(sys.executable, ["-c", code], env) == ["yes", False]
