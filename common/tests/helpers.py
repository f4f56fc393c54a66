"""Small helpers for the unit tests: model directories written from plain JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import pytest

from common.build_checks.selftest import tree_digest  # noqa: F401 - one digest for the image's self-test and the tests

ROOT = Path(__file__).resolve().parents[2]


# A tiny Mixtral's config.json without a head_dim (transformers 4.55 reads it as None): the MoE
# rules' tests add what theirs needs.
TINY_MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def model_dir(path: Path, files: Dict[str, object]) -> Path:
    """A model directory whose files are JSON-dumped objects, or raw str/bytes contents."""
    path.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        target = path / name
        if isinstance(content, bytes):
            target.write_bytes(content)
        elif isinstance(content, str):
            target.write_text(content)
        else:
            target.write_text(json.dumps(content))
    return path


def find_python(version: str) -> Optional[str]:
    """An interpreter of `version` ("3.10") that really runs: on PATH, or a pyenv install."""
    import shutil

    candidates = [shutil.which(f"python{version}")]
    if shutil.which("pyenv"):
        bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True).stdout.split()
        for name in bare:
            if name.startswith(version + "."):
                prefix = subprocess.run(["pyenv", "prefix", name], capture_output=True, text=True).stdout.strip()
                candidates.append(os.path.join(prefix, "bin", f"python{version}"))
    for candidate in filter(None, candidates):
        try:
            if subprocess.run([candidate, "-c", "pass"], capture_output=True, timeout=30).returncode == 0:
                return candidate
        except OSError:
            continue
    return None


def run_common(
    args: List[str], env: Optional[Dict[str, str]] = None, timeout: float = 180, python: Optional[object] = None
) -> subprocess.CompletedProcess:
    """`python -m common ARGS` from the repo root, as a user runs it; `python` another interpreter
    than this one (an engine venv's, as the image's entrypoint runs it)."""
    argv = [str(python or sys.executable), "-m", "common", *args]
    return subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)


def python_stdout(code: str, env: Dict[str, str], timeout: float = 60) -> str:
    """What `python -c CODE` prints from the repo root (its exit must be 0)."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def modules_after_plan(model: Path, card: str, env: Dict[str, str], plan_check: str, modules: str) -> str:
    """The modules (sorted, those `m` for which the expression `modules` holds) a fresh Python has
    imported once it planned `model` for `card`, in a process of its own so that nothing another
    test imported counts; `plan_check` an assertion on the plan `p` ("p.args == [], p.args")."""
    code = (
        "import sys, os; from common.start.preflight import build_plan; "
        f"p = build_plan({str(model)!r}, {card!r}, [], os.environ); "
        f"assert {plan_check}; "
        f"print(sorted(m for m in {modules}))"
    )
    return python_stdout(code, env)


def of_rule(plan: Mapping[str, Any], code: str) -> Tuple[List[dict], List[dict]]:
    """A plan's (preflight's JSON) repairs and findings of one rule code."""
    return [r for r in plan["repairs"] if r["code"] == code], [f for f in plan["findings"] if f["code"] == code]


def only_rule(skip: str, name: str) -> Any:
    """An autouse fixture named `name` that skips the rules `skip` (COMPAT_SKIP): the other rules
    have their own tests, and here they would only add unrelated repairs."""

    @pytest.fixture(autouse=True, name=name)
    def fixture(env_for_tests: Dict[str, str]) -> None:
        env_for_tests["COMPAT_SKIP"] = skip

    return fixture


def launch(env: Dict[str, str], model: Path, args: List[str]) -> subprocess.CompletedProcess:
    """What the entrypoint runs: `python -m common launch -- ARGS` with MODEL_DIR set."""
    return run_common(["launch", "--", *args], dict(env, MODEL_DIR=str(model)))


def preflight_json(model: Path, card: str = "nv-a100", vllm_args: Optional[List[str]] = None, env: Optional[Dict[str, str]] = None) -> dict:
    # The tests read the files the plan wrote: kept (a plain dry run removes them).
    proc = run_common(["preflight", str(model), "--card", card, "--dry-run", "--keep-work-dir", "--json", "--", *(vllm_args or [])], env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


# ---- doctor where the engine's model build is not asked ------------------------------------------

# The dev venv has no vLLM, so the tests that judge a model with its transformers turn doctor's
# model build off (COMPAT_SKIP=MB, conftest.py's env_for_tests). A skipped proof is not a passed
# one: the verdict is then "unverified", never "starts".
SKIPPED_MB = {"code": "MB", "severity": "unverified", "message": "the engine's model class was not built: COMPAT_SKIP names MB"}


def metadata_layer_passed(data: Mapping[str, Any]) -> bool:
    """doctor's JSON (one model's, or a row of many) says the model gets past the engine's metadata
    with MB skipped: every rule's check passed and every repair verified with the engine's
    transformers, nothing fails, and the skipped model build is the only thing left unverified."""
    return data["verdict"] == "unverified" and data["unverified"] == ["MB"] and data["failing"] == [] and SKIPPED_MB in data["findings"]


def metadata_layer_passed_text(proc: subprocess.CompletedProcess) -> bool:
    """The same of doctor's table: exit 2, the skipped MB's row, and MB alone left unknown."""
    row = f"| MB | {SKIPPED_MB['message']} | - | unverified |"
    return proc.returncode == 2 and row in proc.stdout and "verdict: unknown: MB could not be verified here;" in proc.stdout


# The engine's own message when its model code refuses a configuration (vLLM 0.11.0's Llama MLP).
REFUSAL = (
    "vLLM 0.11.0's model code refuses this configuration: ValueError: Unsupported activation: gelu. Only silu is supported "
    "for now. (vllm/model_executor/models/llama.py:92, in __init__)"
)
FAKE_ENGINE = """#!{python}
import io, json, os, runpy, sys
data = sys.stdin.read()
requests = json.loads(data)
if any(r.get("kind") == "model_build" for r in requests):
    with open({record!r}, "a") as fh:
        fh.write(json.dumps({{"requests": requests, "USE_TORCH": os.environ.get("USE_TORCH")}}) + "\\n")
    for i, r in enumerate(requests):
        name = os.path.basename(r["path"])
        if "dies" in name:
            os._exit(3)
        if "refused" in name:
            answer = {{"ok": False, "reason": {refusal!r}}}
        elif "unknowable" in name:
            answer = {{"ok": None, "reason": "cannot tell: the engine's config could not be built here"}}
        else:
            answer = {{"ok": True, "reason": "vLLM 0.11.0 builds LlamaForCausalLM on the meta device"}}
        print(json.dumps(dict(answer, index=i, kind="model_build")), flush=True)
else:  # every other check: the real engine_checks/process.py with this Python's transformers
    sys.argv = sys.argv[1:]
    sys.stdin = io.StringIO(data)
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def fake_engine(folder: Path, name: str = "engine-python", python: str = sys.executable) -> Tuple[Path, Callable[[], List[dict]]]:
    """An engine Python for doctor (COMPAT_ENGINE_PYTHON) whose vLLM is faked: it answers each
    model build (MB) from the name of the path it would serve ("dies": the process dies,
    "refused": REFUSAL, "unknowable": it cannot tell, any other: built), and runs every other
    check for real with `python` (its transformers). Returns its path, and a function listing the
    model-build batches it was sent (with the USE_TORCH each ran under)."""
    import stat

    record = folder / f"{name}.builds.jsonl"
    script = folder / name
    script.write_text(FAKE_ENGINE.format(python=python, record=str(record), refusal=REFUSAL))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, lambda: [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
