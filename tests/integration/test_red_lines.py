"""Issue 11, "Red lines under attack": each hole an adversarial run found, reproduced.

Every test here failed before its fix. The launcher runs in a child process with the exact
environment a container would give it (tests/launcher_harness.py), and the fake vLLM records
the argv and environment it was exec'd with.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.start.launch import PreflightTimeout
from common.tests.helpers import model_dir, tree_digest
from tests.launcher_harness import ROOT, SHELL_VARS, Sandbox

USER_ARGS = ["--port", "8000", "--max-model-len", "4096"]
R5_ARGS = ["--hf-overrides", '{"rope_theta": 1000000.0}']


@pytest.fixture
def sandbox(models):
    boxes = []

    def make(model="v5-generic", **kwargs):
        box = Sandbox(models(model) if isinstance(model, str) else model, **kwargs)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.cleanup()


def slow_python(box: Sandbox, seconds: int = 20) -> str:
    """An 'engine Python' whose verification takes `seconds`."""
    path = box.base / "slow-python"
    path.write_text(f"#!/bin/sh\nsleep {seconds}\n")
    path.chmod(0o755)
    return str(path)


# -- red line 2: starts that never happen -------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "-inf", "1e10", "2147483648", "nan", "-1", "0", "soon", ""])
def test_any_compat_timeout_value_still_starts_vllm(sandbox, value):
    box = sandbox()
    result = box.launch(USER_ARGS, box.env(COMPAT_TIMEOUT=value))
    assert result.returncode == 0, result.stderr
    assert result.argv[1:] == ["serve", str(box.model)] + R5_ARGS + USER_ARGS
    assert "Traceback" not in result.stderr


def test_half_a_second_is_half_a_second_not_no_alarm(sandbox):
    box = sandbox()
    env = box.env(COMPAT_TIMEOUT="0.5", COMPAT_ENGINE_PYTHON=slow_python(box, 30))
    result = box.launch(USER_ARGS, env)
    assert "ran past COMPAT_TIMEOUT=0.5s" in result.stderr
    assert result.elapsed < 10
    assert result.argv[-len(USER_ARGS) :] == USER_ARGS


@pytest.mark.parametrize("closed", [(1,), (2,), (1, 2), (0, 1, 2)], ids=["stdout", "stderr", "both", "all"])
@pytest.mark.parametrize("via", ["launch", "entrypoint"])
def test_closed_stdout_or_stderr_still_starts_vllm(sandbox, closed, via):
    box = sandbox()
    run = box.launch if via == "launch" else box.entrypoint
    result = run(USER_ARGS, box.env(), close_fds=closed)
    assert result.argv[1:] == ["serve", str(box.model)] + R5_ARGS + USER_ARGS


def test_timeout_is_a_deadline_a_rule_cannot_swallow(sandbox):
    """A step that catches Exception around a hang (as every rule does around its own work)
    used to swallow the timeout and leave the preflight running with no alarm."""
    assert issubclass(PreflightTimeout, BaseException) and not issubclass(PreflightTimeout, Exception)
    box = sandbox()
    result = box.launch(USER_ARGS, box.env(COMPAT_TIMEOUT="1"), faults=[("common.start.preflight:gather_facts", "swallow")])
    assert result.elapsed < 10, result.stderr
    assert result.argv[-len(USER_ARGS) :] == USER_ARGS


def test_timeout_bounds_a_slow_verifier_and_kills_it(sandbox):
    """The issue's run: a verifier that sleeps 20 s, COMPAT_TIMEOUT=1: vLLM started after 24 s.
    Now it starts within the second, the verifier is gone, and R5 (no check needed) survives."""
    box = sandbox()
    marker = box.base / "verifier-alive"
    verifier = box.base / "slow-python"
    verifier.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 20\n")
    verifier.chmod(0o755)
    result = box.launch(USER_ARGS, box.env(COMPAT_TIMEOUT="1", COMPAT_ENGINE_PYTHON=str(verifier)))
    assert result.elapsed < 8, result.stderr
    assert "ran past COMPAT_TIMEOUT=1s" in result.stderr
    assert result.argv[1:] == ["serve", str(box.model)] + R5_ARGS + USER_ARGS
    assert marker.exists()  # the verifier did start...
    assert running(str(verifier)) == []  # ...and nothing of it outlived the preflight


def running(needle: str):
    """Pids whose command line mentions `needle`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if needle.encode() in fh.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_entrypoint_check_that_hangs_falls_back_to_vllm(sandbox):
    box = sandbox()
    hung = box.base / "hung-python"
    hung.write_text("#!/bin/sh\nsleep 60\n")
    hung.chmod(0o755)
    result = box.entrypoint(USER_ARGS, box.env(COMPAT_PYTHON=str(hung), COMPAT_CHECK_TIMEOUT="2"))
    assert result.elapsed < 20
    assert "preflight could not run" in result.stderr
    assert result.argv[1:] == ["serve", str(box.model)] + USER_ARGS


# Starts a command with SIGINT at the disposition named in argv[1] (SIG_DFL or SIG_IGN), by exec:
# the pid stays the command's. A disposition of SIG_IGN survives exec; a handler does not.
WITH_SIGINT = "import os, signal, sys\nsignal.signal(signal.SIGINT, getattr(signal, sys.argv[1]))\nos.execv(sys.argv[2], sys.argv[2:])"


def interrupted_launch(box: Sandbox, disposition: str, verifier_seconds: int):
    """The launcher started with SIGINT at `disposition`, sent SIGINT once its verifier runs (the
    verifier writes its pid to a file: no guess of how long the start-up takes); (returncode,
    stderr, the verifier's pid)."""
    marker = box.base / "verifier-started"
    verifier = box.base / "slow-python"
    verifier.write_text(f"#!/bin/sh\necho $$ > {marker}.tmp\nmv {marker}.tmp {marker}\nexec sleep {verifier_seconds}\n")
    verifier.chmod(0o755)
    env = box.env(COMPAT_ENGINE_PYTHON=str(verifier))
    launcher = [box.python, str(ROOT / "common" / "bootstrap.py"), "launch", "--", *USER_ARGS]
    cmd = [sys.executable, "-c", WITH_SIGINT, disposition, *launcher]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), f"the verifier never ran (launcher exit {proc.poll()})"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=verifier_seconds + 60)
    return proc.returncode, err, int(marker.read_text())


def test_ctrl_c_during_the_preflight_stops_the_start(sandbox):
    """Decided: Ctrl-C means stop, as it would have stopped vLLM. Exit 130, vLLM never started,
    and the verifier it interrupted is gone. The launcher starts with SIGINT's default disposition,
    as a container's process does, whatever this test run inherited (see the next test)."""
    box = sandbox()
    returncode, err, verifier = interrupted_launch(box, "SIG_DFL", 60)
    assert returncode == 130, err
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
    assert box.called() is None
    assert not os.path.exists(f"/proc/{verifier}")  # killed and reaped by the launcher


def test_a_sigint_its_starter_ignores_stays_ignored(sandbox):
    """Why the test above lost its Ctrl-C in a full `make test` session: a command started in the
    background by a non-interactive shell (`cmd &`, as CI runners and scripts start `make test`)
    gets SIGINT ignored (POSIX), pytest and every process it starts inherit that, and Python
    installs no KeyboardInterrupt handler for an ignored SIGINT. The launcher keeps the
    disposition it was given, as Python and vLLM do, and the start goes on. A container's process
    never starts so: the platform's Ctrl-C (a stop) reaches the preflight."""
    box = sandbox()
    returncode, err, _ = interrupted_launch(box, "SIG_IGN", 3)
    assert returncode == 0 and "interrupted (Ctrl-C)" not in err, err
    assert box.called() is not None


# -- red line 3: the environment vLLM gets ------------------------------------------------------


@pytest.mark.parametrize("model", ["457-generic", "v5-generic"])
@pytest.mark.parametrize("via", ["bootstrap", "entrypoint"])
def test_no_locale_reaches_vllm_as_it_was_given(sandbox, model, via):
    """`env -i`: no LANG/LC_*. Python's locale coercion sets LC_CTYPE=C.UTF-8 for itself; vLLM
    must get exactly the container's environment (plus repair variables: none for these)."""
    box = sandbox(model)
    env = box.env()
    assert not any(k.startswith("LC_") or k == "LANG" for k in env)
    result = (box.bootstrap if via == "bootstrap" else box.entrypoint)(USER_ARGS, env)
    got = result.env
    if via == "entrypoint":
        env = dict(env, COMPAT_HOME=str(ROOT), COMPAT_PYTHON=box.python)
        got = {k: v for k, v in got.items() if k not in SHELL_VARS}
    assert got == env


def test_a_given_c_locale_is_passed_on_not_the_coerced_one(sandbox):
    box = sandbox("457-generic")
    env = box.env(LC_CTYPE="C")
    result = box.bootstrap(USER_ARGS, env)
    assert result.env == env and result.argv[3:] == USER_ARGS


# -- red line 4: the user's --config file -------------------------------------------------------


def _preflight(box: Sandbox, args, env=None):
    cmd = [box.python, "-m", "common", "preflight", str(box.model), "--card", "nv-a100", "--dry-run", "--json", "--", *args]
    proc = subprocess.run(
        cmd, cwd=str(ROOT), env=env or box.env(COMPAT_ENGINE_PYTHON=sys.executable), capture_output=True, text=True, timeout=180
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


def test_config_file_flags_are_the_users_and_win(sandbox):
    """vLLM inserts the YAML's flags before the command line, so a repair flag on the command
    line used to beat the user's own `tokenizer:` / `chat-template:`."""
    box = sandbox("v5-generic")
    config = box.base / "serve.yaml"
    config.write_text("tokenizer: /their/tokenizer\nchat-template: /their/template.jinja\nport: 8000\n")
    plan = _preflight(box, ["--config", str(config)])
    assert "--tokenizer" not in plan["args"] and "--chat-template" not in plan["args"]
    assert plan["user_args"] == ["--config", str(config)]


def test_config_file_hf_overrides_absorb_ours_like_a_command_line_one(sandbox):
    box = sandbox("v5-generic")
    config = box.base / "serve.yml"
    config.write_text("""hf_overrides: '{"rope_theta": 5, "max_position_embeddings": 64}'\n""")
    plan = _preflight(box, ["--config", str(config), "--port", "1"])
    assert plan["user_args"] == ["--config", str(config), "--port", "1"]
    i = plan["args"].index("--hf-overrides")
    # Theirs, with ours under it, on the command line where it beats the file's: their rope_theta wins.
    assert json.loads(plan["args"][i + 1]) == {"rope_theta": 5, "max_position_embeddings": 64}
    assert plan["args"].count("--hf-overrides") == 1


def test_launch_with_a_config_file_keeps_their_tokenizer(sandbox):
    box = sandbox("v5-generic")
    config = box.base / "serve.yaml"
    config.write_text("tokenizer: /their/tokenizer\n")
    result = box.launch(["--config", str(config)] + USER_ARGS, box.env(COMPAT_ENGINE_PYTHON=sys.executable))
    assert "--tokenizer" not in result.argv[3 : -len(USER_ARGS) - 2]
    assert result.argv[-len(USER_ARGS) - 2 :] == ["--config", str(config)] + USER_ARGS


# -- plans lost to bad input --------------------------------------------------------------------


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
V5_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
}


@pytest.mark.parametrize("depth", [100, 900, 5000, 100000])
def test_deep_json_costs_its_file_not_the_plan(sandbox, tmp_path, depth):
    model = model_dir(
        tmp_path / "m",
        {
            "config.json": V5_CONFIG,
            "chat_template.jinja": TEMPLATE,
            "tokenizer_config.json": '{"extra_special_tokens": ' + _deep(depth) + "}",
            "generation_config.json": _deep(depth),
        },
    )
    box = sandbox(model)
    result = box.launch(USER_ARGS, box.env())
    assert result.argv[1:] == ["serve", str(box.model)] + R5_ARGS + USER_ARGS, result.stderr
    assert "Traceback" not in result.stderr
    plan = _preflight(box, [])
    assert any("tokenizer_config.json" in f["message"] and "nests deeper" in f["message"] for f in plan["findings"])


SURROGATE_CONFIG = (
    '{"architectures": ["Llama\\ud800ForCausalLM"], "model_type": "llama", "hidden_size": 64, '
    '"num_attention_heads": 4, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}}'
)
SURROGATE_TOKENIZER = '{"tokenizer_class": "TokenizersBackend", "extra_special_tokens": ["<a\\udfff>", "<b>"]}'


def test_lone_surrogates_are_carried_and_reported_never_a_crash(sandbox, tmp_path):
    model = model_dir(
        tmp_path / "m",
        {
            "config.json": SURROGATE_CONFIG,
            "tokenizer_config.json": SURROGATE_TOKENIZER,
            "chat_template.jinja": TEMPLATE,
            "tokenizer.json": {"version": "1.0", "model": {"type": "BPE", "vocab": {}}},
        },
    )
    box = sandbox(model)
    plan = _preflight(box, [])
    assert plan["facts"]["architectures"] == ["Llama\\ud800ForCausalLM"]  # carried, visibly
    assert any("lone UTF-16 surrogates" in f["message"] for f in plan["findings"])
    # R4 names the canonical class of model_type llama, R5 restores rope_theta; the tokenizer file
    # holding the surrogate is not rewritten (R3 stands back, reported).
    repaired = ["--hf-overrides", '{"architectures": ["LlamaForCausalLM"], "rope_theta": 1000000.0}']
    assert plan["args"] == repaired
    assert any(f["code"] == "R3" and "unusable" in f["message"] for f in plan["findings"])
    result = box.launch(USER_ARGS, box.env(COMPAT_ENGINE_PYTHON=sys.executable))
    assert result.argv[1:] == ["serve", str(box.model)] + repaired + USER_ARGS
    assert "Traceback" not in result.stderr


def test_preflight_json_survives_a_c_locale_and_surrogate_arguments(sandbox):
    box = sandbox("457-generic")
    env = box.env(LC_ALL="C", PYTHONUTF8="0", PYTHONCOERCECLOCALE="0")
    cmd = [
        box.python,
        "-m",
        "common",
        "preflight",
        str(box.model),
        "--card",
        "nv-a100",
        "--json",
        "--",
        "--served-model-name",
        "m\udcff\u00e9",
    ]
    proc = subprocess.run(cmd, cwd=str(ROOT), env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    # Python reads argv in the C locale as ASCII with surrogate escapes: the bytes are carried.
    assert plan["user_args"][0] == "--served-model-name"
    assert plan["user_args"][1].encode("ascii", "surrogateescape") == "m\udcff\u00e9".encode("utf-8", "surrogateescape")


MEMORY_LIMIT_MB = 200


def test_metadata_that_would_take_gigabytes_is_not_parsed(tmp_path):
    """48 MB of `[{},{},...]` in three metadata files took the preflight to 1.25 GB RSS."""
    blob = b"[" + b"{}," * (16 * 1024 * 1024 // 3 - 1) + b"{}]"
    files = {name: blob for name in ("config.json", "tokenizer_config.json", "generation_config.json")}
    model = model_dir(tmp_path / "m", files)
    code = (
        "import re, sys; from common.start.preflight import build_plan; from common.model.modeldir import ModelDir; "
        "m = ModelDir(sys.argv[1]); [m.read_json(n) for n in ('config.json', 'tokenizer_config.json', 'generation_config.json')]; "
        "p = build_plan(sys.argv[1], 'nv-a100', [], {'COMPAT_WORK_DIR': sys.argv[2]}); "
        # VmHWM is this program's own peak; getrusage's maxrss keeps the peak of the process that
        # forked it (Linux carries it across exec), which a big test runner makes meaningless.
        "print(int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) // 1024); "
        "print([f.message for f in p.findings])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(model), str(tmp_path / "work")], cwd=str(ROOT), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    rss_mb = int(proc.stdout.splitlines()[0])
    assert rss_mb < MEMORY_LIMIT_MB, proc.stdout
    assert "of memory to parse" in proc.stdout


@pytest.mark.parametrize("theta", ["NaN", "Infinity", "-Infinity", "true", "1e400", "-5", "0", '"1e6"'])
@pytest.mark.parametrize("card", ["nv-a100", "iluvatar-bi100"])
def test_r5_restores_only_finite_positive_rope_values(sandbox, tmp_path, theta, card):
    config = (
        '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, '
        '"rope_parameters": {"rope_type": "default", "rope_theta": ' + theta + ', "partial_rotary_factor": NaN}}'
    )
    box = sandbox(model_dir(tmp_path / "m", {"config.json": config}))
    cmd = [box.python, "-m", "common", "preflight", str(box.model), "--card", card, "--dry-run", "--json"]
    proc = subprocess.run(cmd, cwd=str(ROOT), env=box.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert "--rope-theta" not in plan["args"] and "--hf-overrides" not in plan["args"]
    messages = " ".join(f["message"] for f in plan["findings"] if f["code"] == "R5")
    assert "rope_theta" in messages and "partial_rotary_factor" in messages


# -- red line 1: the model is never written ---------------------------------------------------


def test_tmpdir_inside_the_model_is_never_a_work_dir(sandbox):
    box = sandbox("v5-generic")
    before = tree_digest(box.model)
    env = box.env(TMPDIR=str(box.model), COMPAT_ENGINE_PYTHON=sys.executable)
    del env["COMPAT_WORK_DIR"]
    result = box.launch(USER_ARGS, env)
    assert result.argv[3] == "--tokenizer"
    assert not Path(result.argv[4]).resolve().is_relative_to(box.model.resolve())
    assert tree_digest(box.model) == before


def test_a_work_dir_that_is_a_symlink_into_the_model_is_not_used(sandbox):
    box = sandbox("v5-generic")
    (box.model / "sub").mkdir()
    os.symlink(box.model / "sub", box.base / "link")
    before = tree_digest(box.model)
    result = box.launch(USER_ARGS, box.env(COMPAT_WORK_DIR=str(box.base / "link" / "deeper"), TMPDIR=str(box.model)))
    assert result.argv[-len(USER_ARGS) :] == USER_ARGS
    assert tree_digest(box.model) == before


def test_no_writable_work_dir_keeps_the_repairs_that_need_no_file(sandbox):
    """Unwritable COMPAT_WORK_DIR and TMPDIR and no other place: R5's --hf-overrides is kept,
    the tokenizer overlay and R2's template file are dropped (they used to take every repair)."""
    box = sandbox("v5-generic")
    config = json.loads((box.model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (box.model / "tokenizer_config.json").write_text(json.dumps(config))
    for name in ("chat_template.jinja", "chat_template.json"):
        (box.model / name).unlink(missing_ok=True)
    env = box.env(COMPAT_WORK_DIR="/proc/no-such-dir", TMPDIR="/proc/no-such-dir", COMPAT_ENGINE_PYTHON=sys.executable)
    result = box.launch(USER_ARGS, env, faults=[("common.start.workdir:FALLBACK_ROOTS", "value:[]")])
    assert result.argv[1:] == ["serve", str(box.model)] + R5_ARGS + USER_ARGS, result.stderr
    assert "no writable work directory" in result.stderr
    assert "R2 dropped" in result.stderr and "R3+R3b dropped" in result.stderr
