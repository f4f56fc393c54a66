"""How a repaired config.json reaches the engine: --hf-overrides, --hf-config-path or a model
view, chosen from the engine's flags, verified with the engine's own transformers (here the dev
venv's 4.57), and never written into the model."""

import json
import os
import sys
from pathlib import Path

import pytest

from common.start import preflight
from common.plan import Plan
from common.engine.profile import PROFILE_DIR, Profile

from common.tests.helpers import model_dir, tree_digest

LLAMA = {
    "architectures": ["TinyChatForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "vocab_size": 396,
    "rope_theta": 10000.0,
}


def engine(card="nv-a100", drop_flags=(), **facts):
    """A card profile as JSON, with serve flags removed and engine facts replaced."""
    with open(os.path.join(PROFILE_DIR, f"{card}.json"), encoding="utf-8") as fh:
        data = json.load(fh)
    data["engine"]["engine_args"] = [a for a in data["engine"]["engine_args"] if a not in drop_flags]
    data["engine"].update(facts)
    return Profile(data)


OLD_ENGINE = dict(drop_flags=("hf_overrides", "hf_config_path"), transformers_backend=False)


@pytest.fixture
def model(tmp_path):
    return model_dir(
        tmp_path / "model", {"config.json": LLAMA, "model.safetensors": b"\0" * 64, "tokenizer.json": {"model": {"vocab": {}}}}
    )


def plan_for(monkeypatch, tmp_path, model, profile, user=(), verify=True, model_arg=None):
    monkeypatch.setattr(preflight, "load_profile", lambda card: profile)
    env = {
        "COMPAT_WORK_DIR": str(tmp_path / "work"),
        "COMPAT_ENGINE_PYTHON": sys.executable,
        "COMPAT_SKIP": "R2,R3,R3b,R3c,R5,R6,H1,R7,R8",
        "PATH": os.environ["PATH"],
    }
    arg = model_arg or str(model)
    plan = Plan(card=profile.card, model_dir=os.path.abspath(arg))
    return preflight.build_plan(arg, profile.card, list(user), env, verify=verify, plan=plan)


def test_an_engine_without_flags_serves_a_verified_model_view(monkeypatch, tmp_path, model):
    before = tree_digest(model)
    plan = plan_for(monkeypatch, tmp_path, model, engine(**OLD_ENGINE), user=["--port", "8000"])
    [r4] = plan.repairs
    assert r4.verified is True and "reads as LlamaConfig" in r4.verification
    view = Path(plan.model_path)
    assert plan.view["path"] == str(view) and plan.view["codes"] == ["R4"] and view.parent == Path(plan.work_dir)
    assert json.loads((view / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert not (view / "config.json").is_symlink()
    for name in ("model.safetensors", "tokenizer.json"):
        assert (view / name).is_symlink() and os.readlink(view / name) == str(model / name)
    assert plan.args == ["--served-model-name", str(model)] and plan.user_args == ["--port", "8000"]
    assert "--hf-overrides" not in plan.args
    assert tree_digest(model) == before  # red line 1
    report = json.loads((Path(plan.work_dir) / "report.json").read_text())
    assert report["model_path"] == str(view) and report["model_dir"] == str(model)


def test_the_served_name_is_the_path_as_the_platform_passed_it(monkeypatch, tmp_path, model):
    monkeypatch.chdir(model.parent)
    plan = plan_for(monkeypatch, tmp_path, model, engine(**OLD_ENGINE), model_arg="model")
    assert plan.args == ["--served-model-name", "model"]


def test_a_users_served_model_name_is_kept(monkeypatch, tmp_path, model):
    plan = plan_for(monkeypatch, tmp_path, model, engine(**OLD_ENGINE), user=["--served-model-name=tiny"])
    assert plan.view is not None and plan.args == [] and plan.user_args == ["--served-model-name=tiny"]


def test_an_engine_with_hf_overrides_keeps_the_model_path(monkeypatch, tmp_path, model):
    plan = plan_for(monkeypatch, tmp_path, model, engine(transformers_backend=False))
    assert plan.view is None and plan.model_path == str(model)
    assert plan.args == ["--hf-overrides", json.dumps({"architectures": ["LlamaForCausalLM"]})]
    assert not (Path(plan.work_dir) / "model").exists()


def test_a_nested_edit_goes_through_hf_config_path(monkeypatch, tmp_path):
    """H2 on a nested text_config: --hf-overrides cannot set nested values, --hf-config-path can."""
    config = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "text_config": {"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 4},
        "vision_config": {"model_type": "clip_vision_model"},
    }
    model = model_dir(tmp_path / "model", {"config.json": config})
    profile = engine(head_dim_none_fallback=False, null_head_dim_model_types=["mistral"])
    monkeypatch.setenv("COMPAT_SKIP", "")
    plan = plan_for(monkeypatch, tmp_path, model, profile)
    [h2] = [r for r in plan.repairs if r.code == "H2"]
    assert h2.verified is True, h2.verification
    directory = plan.args[plan.args.index("--hf-config-path") + 1]
    written = json.loads((Path(directory) / "config.json").read_text())
    assert written["text_config"]["head_dim"] == 64 and written["vision_config"] == config["vision_config"]
    assert plan.view is None and plan.model_path == str(model)


def test_a_view_the_engine_cannot_read_is_dropped_with_a_finding(monkeypatch, tmp_path):
    config = dict(LLAMA, model_type="acme_unknown")
    model = model_dir(tmp_path / "model", {"config.json": config})
    profile = engine(**OLD_ENGINE, model_type_architectures={"acme_unknown": "LlamaForCausalLM"})
    plan = plan_for(monkeypatch, tmp_path, model, profile)
    [r4] = plan.repairs
    assert r4.verified is False and plan.view is None and plan.model_path == str(model) and plan.args == []
    assert any(f.code == "R4" and f.severity == "error" and "verification failed" in f.message for f in plan.findings)


def test_a_users_hf_config_path_is_never_replaced(monkeypatch, tmp_path, model):
    profile = engine(drop_flags=("hf_overrides",), transformers_backend=False)
    plan = plan_for(monkeypatch, tmp_path, model, profile, user=["--hf-config-path", "/theirs"])
    assert plan.view is None and plan.args == [] and plan.repairs[0].verified is False
    assert "--hf-config-path" in plan.findings[-1].message


def test_unverifiable_view_is_not_served(monkeypatch, tmp_path, model):
    plan = plan_for(monkeypatch, tmp_path, model, engine(**OLD_ENGINE), verify=False)
    assert plan.view is None and plan.args == [] and plan.repairs[0].verified is None


def test_dry_runs_and_doctor_leave_nothing_behind(tmp_path, models, env_for_tests):
    """Dry runs remove what they wrote (114 doctor runs once left 114 work dirs); launch keeps its
    work dir, since vLLM reads from it."""
    from common.tests.helpers import run_common

    work = tmp_path / "work"
    env = dict(env_for_tests, COMPAT_WORK_DIR=str(work))
    model = models("v5-generic")
    for args in (["preflight", str(model), "--card", "nv-a100", "--dry-run", "--json"], ["doctor", str(model), "--card", "nv-a100"]):
        result = run_common(args, env)
        # doctor: 2, its model build skipped here (env_for_tests: COMPAT_SKIP=MB) leaves MB unverified
        assert result.returncode == (2 if args[0] == "doctor" else 0), result.stderr
        assert list(work.iterdir()) == [], args
    kept = run_common(["preflight", str(model), "--card", "nv-a100", "--dry-run", "--keep-work-dir", "--json"], env)
    plan = json.loads(kept.stdout)
    assert Path(plan["work_dir"]).is_dir() and Path(plan["args"][1], "tokenizer_config.json").is_file()


def test_a_nested_value_the_engine_does_not_read_fails_verification():
    """The engine's answer for text_config.rope_theta is compared, not skipped."""
    from common.start.model_view import edits_mismatch

    edits = {"text_config": {"model_type": "llama", "rope_theta": 1e6, "rope_parameters": {"rope_theta": 1e6}}}
    assert edits_mismatch(edits, {}, {"attributes": {"rope_theta": 1e6}}) is None
    why = edits_mismatch(edits, {}, {"attributes": {"rope_theta": 10000.0}})
    assert why == "the engine's transformers reads text_config.rope_theta=10000.0, not 1000000.0"


def test_two_repairs_of_one_nested_config_keep_both_keys():
    """R5 (rope) and H2 (head_dim) each give text_config whole: neither loses the other's key."""
    from common.start.model_view import changed_names, merge_edits
    from common.plan import Repair

    text = {"model_type": "mistral", "hidden_size": 256}
    r5, h2 = Repair("R5", "", ""), Repair("H2", "", "")
    r5.config_edits = {"text_config": dict(text, rope_theta=1e6)}
    h2.config_edits = {"text_config": dict(text, head_dim=64)}
    merged = merge_edits([r5, h2])
    assert merged == {"text_config": dict(text, rope_theta=1e6, head_dim=64)}
    assert changed_names(merged, {"text_config": text}) == ["head_dim", "rope_theta"]
