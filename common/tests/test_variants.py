"""A card with several engines: doctor reports every variant of the card and recommends the one
that starts the model with the fewest repairs; `card@variant` names one alone everywhere a card
name goes."""

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from common.doctor import doctor

from common.engine import profile

from common.tests.helpers import fake_engine, metadata_layer_passed, model_dir, run_common

# The newest engine's transformers is 5.x: the author venv's stands in for its Python here.
NEXT_PYTHON = Path(__file__).resolve().parents[2] / ".venv-author" / "bin" / "python"
needs_transformers5 = pytest.mark.skipif(not NEXT_PYTHON.exists(), reason="needs .venv-author: run `make author-env`")

QWEN35 = {"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64}
# An architecture vLLM 0.32 registers and 0.11 lacks, of which the image ships no backport, of a
# model type 0.11's transformers (4.57) cannot read.
JAIS2 = {"architectures": ["Jais2ForCausalLM"], "model_type": "jais2", "hidden_size": 256, "num_attention_heads": 4}
GEMMA4 = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64}


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    """The committed nv-a100 profile, and an `nv-a100@next` one of a transformers-5 engine that
    serves Qwen3.5 (its facts as the newest engine's snapshot gives them)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    shutil.copy(os.path.join(profile.PROFILE_DIR, "nv-a100.json"), folder / "nv-a100.json")
    data = json.loads((folder / "nv-a100.json").read_text())
    data["card"], data["vllm_version"], data["transformers_version"] = "nv-a100@next", "0.32.0", "5.19.0"
    engine = data["engine"]
    engine["architectures"] += ["Qwen3_5ForCausalLM", "Jais2ForCausalLM"]
    engine["config_model_types"] += ["qwen3_5", "jais2"]
    engine["tokenizer_classes"].append("TokenizersBackend")
    engine["reads"] = {"rope_parameters": True, "dtype": True, "extra_special_tokens_list": True}
    (folder / "nv-a100@next.json").write_text(json.dumps(data))
    monkeypatch.setattr(profile, "PROFILE_DIR", str(folder))
    return folder


def test_variants_of_a_card(profiles):
    assert profile.variants_of("nv-a100") == ["nv-a100", "nv-a100@next"]
    assert profile.variants_of("nv-a100@next") == ["nv-a100@next"]
    assert profile.load_profile("nv-a100@next").transformers_version == "5.19.0"


def building_engines(env_for_tests, tmp_path) -> dict:
    """Each variant's engine Python (the dev venv's for nv-a100, the author venv's for
    nv-a100@next) with a fake vLLM that builds every model class (helpers.fake_engine): only a
    variant whose model build passed "starts", and only such a variant is recommended."""
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"))
    env.pop("COMPAT_SKIP")
    env["COMPAT_ENGINE_PYTHON"] = str(fake_engine(tmp_path, "default-python")[0])
    env["COMPAT_ENGINE_PYTHON_NEXT"] = str(fake_engine(tmp_path, "next-python", str(NEXT_PYTHON))[0])
    return env


@needs_transformers5
def test_doctor_reports_every_variant_and_recommends_the_one_that_starts(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": JAIS2})
    env = building_engines(env_for_tests, tmp_path)
    assert doctor.run(str(model), "nv-a100", [], env, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"] == "nv-a100@next" and data["card"] == "nv-a100@next"
    # vLLM 0.11 lacks the architecture, its transformers the config class, and the image has
    # neither (CONFIG, R4).
    assert data["variants"]["nv-a100"]["verdict"] == "fails" and {"CONFIG", "R4"} <= set(data["variants"]["nv-a100"]["failing"])
    assert data["variants"]["nv-a100@next"]["verdict"] == "starts"
    assert doctor.run(str(model), "nv-a100", [], env, as_json=False) == 0
    text = capsys.readouterr().out
    assert "| nv-a100 | 0.11.0 | fails |" in text and "| nv-a100@next (recommended) | 0.32.0 | starts |" in text
    assert "recommended: nv-a100@next (the nv-a100 engine: fails)" in text


@needs_transformers5
def test_a_transformers5_model_needs_no_repair_on_a_transformers5_engine(profiles, models, env_for_tests, capsys, tmp_path):
    """The profile decides, not a version number: R3, R3b and R5 find nothing to repair there."""
    env = building_engines(env_for_tests, tmp_path)
    assert doctor.run(str(models("v5-generic")), "nv-a100", [], env, as_json=True) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["recommended"] == "nv-a100@next" and data["repairs"] == [] and data["args"] == []
    assert data["variants"]["nv-a100"]["verdict"] == "starts" and data["variants"]["nv-a100"]["args"]


@needs_transformers5
def test_a_named_variant_is_judged_alone(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": QWEN35})
    # Its own variable unset: the variant --card names takes COMPAT_ENGINE_PYTHON.
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"), COMPAT_ENGINE_PYTHON=str(NEXT_PYTHON))
    env.pop("COMPAT_ENGINE_PYTHON_NEXT")
    assert doctor.run(str(model), "nv-a100@next", [], env, as_json=True) == 2
    data = json.loads(capsys.readouterr().out)
    assert "variants" not in data and data["engine_python"]["source"] == "COMPAT_ENGINE_PYTHON"
    assert metadata_layer_passed(data), data  # 5.x reads Qwen3.5: nothing fails; MB is skipped here


@needs_transformers5
def test_a_named_variant_is_checked_with_its_own_engine_whatever_else_is_set(profiles, tmp_path, env_for_tests, capsys):
    """As docs/images-and-releases.md tells a user: both variables set, `--card nv-a100@next`.
    The variant's own variable names its engine; COMPAT_ENGINE_PYTHON is the default engine's
    (here the dev venv's transformers 4.57, which cannot read Qwen3.5 as the variant's 5.x does)."""
    model = model_dir(tmp_path / "m", {"config.json": QWEN35})
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"), COMPAT_ENGINE_PYTHON=sys.executable)
    env["COMPAT_ENGINE_PYTHON_NEXT"] = str(NEXT_PYTHON)
    assert doctor.run(str(model), "nv-a100@next", [], env, as_json=True) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["engine_python"] == {"path": str(NEXT_PYTHON), "source": "COMPAT_ENGINE_PYTHON_NEXT"}
    assert metadata_layer_passed(data) and [r["code"] for r in data["repairs"]] == ["R2"], data  # no R12: 5.x reads Qwen3.5


def test_every_variant_row_carries_the_tokens_of_its_own_engine(profiles, models, tmp_path, env_for_tests, capsys):
    """`tokens` is judged per engine: each variant row holds its own engine's verdict on the
    model's tokens (its cells), not the recommended variant's."""
    model = models("v5-generic")
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"))
    doctor.run(str(model), "nv-a100", [], env, as_json=True)
    data = json.loads(capsys.readouterr().out)
    assert set(data["variants"]) == {"nv-a100", "nv-a100@next"}
    for name, row in data["variants"].items():
        own = doctor.tokens_of({"model_dir": str(model), "card": name, "user_args": []})
        assert (row["tokens"], row["tokens_cell"], row["tokens_open"], row["tokens_tp"]) == (*own, 1), name
    # A cell of one engine proves nothing on another: a card whose engine ran no cell of the
    # model's family leaves its row unproven, naming what no cell covered.
    gemma = model_dir(tmp_path / "g", {"config.json": GEMMA4})
    doctor.run(str(gemma), "nv-a100", [], env, as_json=True)
    rows = json.loads(capsys.readouterr().out)["variants"]
    for name, row in rows.items():
        assert (row["tokens"], row["tokens_cell"], row["tokens_open"]) == doctor.tokens_of(
            {"model_dir": str(gemma), "card": name, "user_args": []}
        ), name
    assert rows["nv-a100"]["tokens"] == "unproven" and rows["nv-a100"]["tokens_open"], rows["nv-a100"]
    doctor.run(str(model), "nv-a100", [], env, as_json=False)
    assert "| tokens |" in capsys.readouterr().out


def test_a_variant_without_its_engines_python_is_unverified_not_judged_by_another(profiles, tmp_path, env_for_tests, capsys):
    model = model_dir(tmp_path / "m", {"config.json": JAIS2})
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(tmp_path / "work"))
    assert doctor.run(str(model), "nv-a100", [], env, as_json=True) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["variants"]["nv-a100@next"]["verdict"] == "unverified" and data["recommended"] is None


# ---- which Python verifies each engine (common/engine/engines.py) -----------------------------------

CHECKOUT = Path(__file__).resolve().parents[2]
ENGINE_VENVS = [CHECKOUT / name / "bin" / "python" for name in (".venv-engine", ".venv-engine-next")]


def fake_checkout(tmp_path, snapshot_env):
    """A checkout holding one engine venv: its bin/python is a link to this interpreter."""
    python = tmp_path / "checkout" / snapshot_env / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.symlink_to(os.path.realpath(sys.executable))
    return tmp_path / "checkout", python


def test_the_variable_wins_then_the_checkouts_venv_then_nothing_for_a_variant(tmp_path, monkeypatch):
    from common.engine import engines

    # make profiles writes where this checkout keeps each card's engine (card.toml's snapshot_env).
    venvs = json.loads(Path(engines.ENGINE_VENVS).read_text())
    assert venvs["nv-a100@next"] == ".venv-engine-next" and venvs["iluvatar-bi100"] == ".venv-engine055"
    root, python = fake_checkout(tmp_path, ".venv-engine-next")
    monkeypatch.setattr(engines, "image_card", lambda: None)
    named = engines.resolve("nv-a100@next", {"COMPAT_ENGINE_PYTHON_NEXT": "/opt/next/python"}, root=str(root))
    assert (named.path, named.source) == ("/opt/next/python", "COMPAT_ENGINE_PYTHON_NEXT")
    found = engines.resolve("nv-a100@next", {"COMPAT_ENGINE_PYTHON": "/opt/default/python"}, root=str(root))
    assert (found.path, found.source) == (str(python), "this checkout's engine venv")
    none = engines.resolve("nv-a100@next", {}, root=str(tmp_path / "elsewhere"))
    assert none.path == "" and "COMPAT_ENGINE_PYTHON_NEXT" in none.source and ".venv-engine-next" in none.source
    assert none.env({})["COMPAT_ENGINE_PYTHON"].startswith("(no engine Python")  # its checks cannot run
    # A card's default engine without a venv: the Python running doctor, as preflight does.
    default = engines.resolve("nv-a100", {}, root=str(tmp_path / "elsewhere"))
    assert default.path == sys.executable and "no COMPAT_ENGINE_PYTHON set" in default.source
    # A variant named by --card itself takes COMPAT_ENGINE_PYTHON too.
    asked = engines.resolve("nv-a100@next", {"COMPAT_ENGINE_PYTHON": "/opt/x"}, asked=True, root=str(tmp_path / "elsewhere"))
    assert asked.path == "/opt/x"
    # ... after its own: with both set, the variant's own names its engine.
    both = {"COMPAT_ENGINE_PYTHON": "/opt/x", "COMPAT_ENGINE_PYTHON_NEXT": "/opt/next/python"}
    asked = engines.resolve("nv-a100@next", both, asked=True, root=str(tmp_path / "elsewhere"))
    assert (asked.path, asked.source) == ("/opt/next/python", "COMPAT_ENGINE_PYTHON_NEXT")


def test_inside_an_image_its_own_python_is_the_default(tmp_path, monkeypatch):
    from common.engine import engines

    root, _ = fake_checkout(tmp_path, ".venv-engine")
    monkeypatch.setattr(engines, "image_card", lambda: "nv-a100")
    inside = engines.resolve("nv-a100", {}, root=str(root))
    assert (inside.path, inside.source) == (sys.executable, "the image's own Python")
    assert engines.resolve("nv-a100", {"COMPAT_ENGINE_PYTHON": "/opt/x"}, root=str(root)).path == "/opt/x"
    # Another card's engine is not the image's: its variant stays without one.
    assert engines.resolve("nv-a100@next", {}, root=str(root)).path == ""


@pytest.mark.skipif(not all(p.exists() for p in ENGINE_VENVS), reason="needs .venv-engine and .venv-engine-next: run `make envs`")
def test_doctor_finds_the_checkouts_engine_venvs_and_says_which_verified(models):
    """No COMPAT_ENGINE_PYTHON* set: each variant of nv-a100 is verified with this checkout's own
    engine venv (0.11.0's, 0.32.0's), never left unverified for want of a variable, and each
    verdict names the Python that verified it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPAT_")}
    proc = run_common(["doctor", str(models("v5-generic")), "--card", "nv-a100", "--json"], env, timeout=300)
    data = json.loads(proc.stdout)
    variants = data["variants"]
    assert proc.returncode == 0 and variants["nv-a100@next"]["verdict"] == "starts" and variants["nv-a100"]["verdict"] == "starts", data
    for name, venv in (("nv-a100", ENGINE_VENVS[0]), ("nv-a100@next", ENGINE_VENVS[1])):
        assert variants[name]["engine_python"] == {"path": str(venv), "source": "this checkout's engine venv"}
    assert data["recommended"] == "nv-a100@next" and data["repairs"] == []
    # Served as its file says, in bfloat16: no cell ran that dtype (every cell runs float32).
    assert variants["nv-a100"]["tokens"] == "unproven" and "@dtype=bfloat16" in variants["nv-a100"]["tokens_open"], variants
    text = run_common(["doctor", str(models("v5-generic")), "--card", "nv-a100", "--", "--dtype", "float32"], env, timeout=300).stdout
    assert "checked with: .venv-engine-next/bin/python (this checkout's engine venv)" in text
    assert "| nv-a100 | 0.11.0 | starts | R3, R3b, R5 | - | proven (" in text
    assert ") | .venv-engine/bin/python (this checkout's engine venv) |" in text
