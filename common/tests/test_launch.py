"""The launcher and entrypoint: exec vLLM with an argv list, and never block the start."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.tests.helpers import ROOT, find_python, launch, model_dir, modules_after_plan, tree_digest

ENTRYPOINT = ROOT / "common" / "entrypoint.sh"


def test_clean_model_execs_vllm_with_only_the_users_args(models, env_for_tests, fake_vllm):
    _, called = fake_vllm
    model = models("457-generic")
    proc = launch(env_for_tests, model, ["--port", "8000", "--served-model-name", "x"])
    assert proc.returncode == 0, proc.stderr
    got = called()
    assert got["argv"][1:] == ["serve", str(model), "--port", "8000", "--served-model-name", "x"]
    assert "no repairs needed" in proc.stderr
    # Red line 3: zero environment changes.
    compat_added = {k for k in got["env"] if k not in env_for_tests and k != "MODEL_DIR"}
    assert compat_added <= {"PWD", "OLDPWD", "_"}


def test_broken_model_execs_with_repairs_before_user_args(models, env_for_tests, fake_vllm):
    _, called = fake_vllm
    model = models("v5-generic")
    before = tree_digest(model)
    proc = launch(env_for_tests, model, ["--port", "8000"])
    assert proc.returncode == 0, proc.stderr
    argv = called()["argv"]
    assert argv[1:3] == ["serve", str(model)]
    # The tokenizer overlay (R3+R3b) and the rope_theta transformers 4.57 would lose (R5).
    assert argv[3] == "--tokenizer" and argv[5:] == ["--hf-overrides", '{"rope_theta": 1000000.0}', "--port", "8000"]
    report = json.loads((Path(argv[4]).parent / "report.json").read_text())
    assert [r["code"] for r in report["repairs"]] == ["R3", "R3b", "R5"]
    assert tree_digest(model) == before


def test_compat_disable_execs_untouched(models, env_for_tests, fake_vllm):
    _, called = fake_vllm
    env = dict(env_for_tests, COMPAT_DISABLE="1")
    proc = launch(env, models("v5-generic"), ["--port", "1"])
    assert called()["argv"][1:] == ["serve", str(models("v5-generic")), "--port", "1"]
    assert "COMPAT_DISABLE=1" in proc.stderr


def test_timeout_still_execs(models, env_for_tests, fake_vllm, tmp_path):
    _, called = fake_vllm
    slow = tmp_path / "slow-python"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(0o755)
    env = dict(env_for_tests, COMPAT_ENGINE_PYTHON=str(slow), COMPAT_TIMEOUT="2")
    proc = launch(env, models("v5-generic"), ["--port", "1"])
    assert "ran past COMPAT_TIMEOUT=2s" in proc.stderr
    # The tokenizer overlay was still being verified: dropped. R5's overrides needed no check: kept.
    assert called()["argv"][1:] == ["serve", str(models("v5-generic")), "--hf-overrides", '{"rope_theta": 1000000.0}', "--port", "1"]


@pytest.mark.parametrize(
    "files",
    [
        {},  # empty model dir
        {"config.json": b"\xef\xbb\xbf{broken", "tokenizer_config.json": [1, 2]},
        {
            "config.json": {"architectures": "LlamaForCausalLM", "head_dim": "x"},
            "tokenizer_config.json": {"tokenizer_class": 7, "extra_special_tokens": ["; rm -rf /", "$(reboot)"]},
        },
        {
            "tokenizer.json": b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n",
            "tokenizer_config.json": {"tokenizer_class": "TokenizersBackend"},
        },
    ],
)
def test_bad_input_never_blocks_start(tmp_path, env_for_tests, fake_vllm, files):
    _, called = fake_vllm
    model = model_dir(tmp_path / "m", files)
    proc = launch(env_for_tests, model, ["--port", "1"])
    assert "Traceback" not in proc.stderr
    argv = called()["argv"]
    assert argv[1:3] == ["serve", str(model)] and argv[-2:] == ["--port", "1"]
    assert all("rm -rf" not in a and "reboot" not in a for a in argv)


def test_missing_model_dir_still_execs(tmp_path, env_for_tests, fake_vllm):
    _, called = fake_vllm
    proc = launch(env_for_tests, tmp_path / "absent", [])
    assert "does not exist" in proc.stderr and called() is not None


def test_missing_vllm_exits_127_with_a_line(models, env_for_tests):
    env = dict(env_for_tests, PATH="/usr/bin:/bin", COMPAT_VLLM="vllm-not-installed")
    proc = launch(env, models("457-generic"), [])
    assert proc.returncode == 127 and "cannot exec vllm-not-installed" in proc.stderr


def _entrypoint(env, *args):
    env = dict(env)
    env.setdefault("COMPAT_HOME", str(ROOT))
    env.setdefault("COMPAT_PYTHON", sys.executable)
    return subprocess.run(["bash", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=180)


def test_entrypoint_runs_the_launcher(models, env_for_tests, fake_vllm):
    _, called = fake_vllm
    calls = called.count
    env = dict(env_for_tests, MODEL_DIR=str(models("v5-generic")))
    proc = _entrypoint(env, "--port", "9")
    assert proc.returncode == 0, proc.stderr
    assert calls() == 1  # vLLM's exit ends the container; it is never started a second time
    assert called()["argv"][3] == "--tokenizer", proc.stderr
    assert called()["argv"][-2:] == ["--port", "9"]


def test_entrypoint_leaves_a_clean_models_environment_as_given(models, env_for_tests, fake_vllm):
    """Red line 3 through the real entrypoint: vLLM gets the platform's environment, no PYTHONPATH
    of ours, no variable the entrypoint made up."""
    _, called = fake_vllm
    env = dict(env_for_tests, MODEL_DIR=str(models("457-generic")))
    env.pop("PYTHONPATH", None)
    proc = _entrypoint(env, "--port", "9")
    assert proc.returncode == 0, proc.stderr
    got = called()
    assert got["argv"][1:] == ["serve", str(models("457-generic")), "--port", "9"]
    given = dict(env, COMPAT_HOME=str(ROOT), COMPAT_PYTHON=sys.executable)
    shell = {"PWD", "OLDPWD", "_", "SHLVL"}  # what bash itself maintains
    assert {k for k in got["env"] if k not in given} <= shell
    assert {k: v for k, v in got["env"].items() if k not in shell} == {k: v for k, v in given.items() if k not in shell}


@pytest.mark.parametrize("python", ["false", "/nonexistent/python3"])
def test_entrypoint_execs_vllm_when_python_fails(models, env_for_tests, fake_vllm, python):
    _, called = fake_vllm
    env = dict(env_for_tests, MODEL_DIR=str(models("v5-generic")), COMPAT_PYTHON=python)
    proc = _entrypoint(env, "--port", "9", "arg with spaces")
    assert "preflight could not run" in proc.stderr
    assert called()["argv"][1:] == ["serve", str(models("v5-generic")), "--port", "9", "arg with spaces"]


def test_clean_path_imports_neither_transformers_nor_torch(models, env_for_tests):
    modules = "('transformers', 'torch', 'tokenizers') if m in sys.modules"
    assert modules_after_plan(models("457-generic"), "nv-a100", env_for_tests, "p.args == [], p.args", modules) == "[]"


def test_runtime_package_runs_on_python_310(models, env_for_tests, tmp_path):
    """The BI-100 image's Python is 3.10: the clean path must run there with the stdlib only."""
    python310 = find_python("3.10")
    if python310 is None:
        pytest.skip("no Python 3.10 on this machine (lint's vermin still holds the line)")
    env = dict(env_for_tests)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [python310, "-S", "-m", "common", "preflight", str(models("457-generic")), "--card", "iluvatar-bi100", "--json"],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # transformers 4.57 saves `dtype`, which BI-100's transformers 4.55 does not read: only R5.
    plan = json.loads(proc.stdout)
    assert [r["code"] for r in plan["repairs"]] == ["R5"] and plan["args"] == ["--dtype", "bfloat16"]
    assert os.path.isdir(ROOT / "common")


def test_exec_env_is_the_started_environment_not_pythons_coerced_copy(tmp_path):
    """PEP 538 coercion writes LC_CTYPE into os.environ; /proc/self/environ still holds the start."""
    code = "import json, os; from common.start.launch import original_environ; print(json.dumps([os.environ.get('LC_CTYPE'), original_environ()]))"
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env={"A": "1"}, capture_output=True, text=True, timeout=60)
    coerced, original = json.loads(proc.stdout)
    assert coerced == "C.UTF-8" and original == {"A": "1"}


def test_without_proc_the_coerced_locale_is_dropped(monkeypatch):
    import builtins

    from common.start import launch as launch_module

    real_open = builtins.open
    monkeypatch.setattr(
        builtins,
        "open",
        lambda path, *a, **k: (_ for _ in ()).throw(OSError("no /proc")) if str(path).startswith("/proc") else real_open(path, *a, **k),
    )
    monkeypatch.setattr(launch_module.sys, "flags", type("F", (), {"utf8_mode": 1})())
    monkeypatch.setattr(os, "environ", {"LC_CTYPE": "C.UTF-8", "A": "1"})
    assert launch_module.original_environ() == {"A": "1"}


@pytest.mark.parametrize(
    "changed, ok",
    [
        (["--port", "1", "--hf-overrides", '{"a": 1}'], True),  # their overrides absorbed ours
        (["--port", "2", "--hf-overrides", '{"b": 2}'], False),
        (["--port", "1"], False),
        (["--port", "1", "--hf-overrides", '{"b": 2}', "--x"], False),
    ],
)
def test_the_last_guard_lets_only_their_overrides_value_change(changed, ok):
    from common.plan import Plan
    from common.start.launch import keeps_red_lines

    plan = Plan(card="nv-a100", model_dir="/m")
    plan.args, plan.user_args = ["--chat-template", "/t"], changed
    assert keeps_red_lines(plan, ["--port", "1", "--hf-overrides", '{"b": 2}']) is ok


def _seeding_home(tmp_path: Path) -> Path:
    """A COMPAT_HOME like the image's: the runtime package, and vLLM's baked model-class
    inspections (one entry)."""
    home = tmp_path / "compat-home"
    (home / "vllm-cache" / "modelinfos").mkdir(parents=True)
    (home / "vllm-cache" / "modelinfos" / "llama.json").write_text('{"baked": true}')
    (home / "common").symlink_to(ROOT / "common")
    return home


def test_entrypoint_seeds_vllms_cache_outside_the_model_and_never_inside(models, env_for_tests, fake_vllm, tmp_path):
    """The baked inspections go where the start's vLLM keeps its cache, and nowhere when that
    cache resolves inside the model directory (directly or through a symlink): the model is
    never written, the start goes on, and the log says why vLLM inspects for itself."""
    _, called = fake_vllm
    home = _seeding_home(tmp_path)
    model = tmp_path / "model"
    shutil.copytree(models("457-generic"), model)  # writable, as a platform's mount may be
    before = sorted(p.relative_to(model) for p in model.rglob("*"))
    (tmp_path / "into-model").symlink_to(model)
    env = dict(env_for_tests, MODEL_DIR=str(model), COMPAT_HOME=str(home))
    env.pop("XDG_CACHE_HOME", None)

    proc = _entrypoint(dict(env, HOME=str(tmp_path / "home"), VLLM_CACHE_ROOT=""), "--port", "9")
    assert proc.returncode == 0, proc.stderr
    seeded = tmp_path / "home" / ".cache" / "vllm" / "modelinfos" / "llama.json"
    assert seeded.read_text() == '{"baked": true}' and called()["argv"][-2:] == ["--port", "9"]
    seeded.write_text('{"vllms own": true}')  # a cache with inspections of its own keeps them
    assert _entrypoint(dict(env, HOME=str(tmp_path / "home"), VLLM_CACHE_ROOT=""), "--port", "9").returncode == 0
    assert seeded.read_text() == '{"vllms own": true}'

    for root in (model / ".cache" / "vllm", tmp_path / "into-model" / "cache"):
        proc = _entrypoint(dict(env, VLLM_CACHE_ROOT=str(root)), "--port", "9")
        assert proc.returncode == 0, proc.stderr
        assert f"vLLM's cache {root} is inside the model directory" in proc.stderr
        assert called()["argv"][-2:] == ["--port", "9"]
    # Climbing out of a directory that does not exist yet, into the model: not resolvable, so
    # not written (mkdir -p would have created it inside the model).
    climbing = f"{tmp_path}/not-yet/../model/cache"
    proc = _entrypoint(dict(env, VLLM_CACHE_ROOT=climbing), "--port", "9")
    assert proc.returncode == 0 and f"vLLM's cache {climbing} cannot be resolved" in proc.stderr, proc.stderr
    assert called()["argv"][-2:] == ["--port", "9"]
    assert sorted(p.relative_to(model) for p in model.rglob("*")) == before
