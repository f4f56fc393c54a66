"""R10 on real vLLM 0.5.5 (the BI-100 engine generation, built for the CPU): families released
after the engine, served through the image's backports.

Per backported family, a tiny model saved by the engine's own transformers 4.55 and one saved by
transformers 5 (so R10 composes with the tokenizer and config repairs), every RMSNorm weight drawn
at random (a per-head q_norm / k_norm that got the wrong weight changes the tokens):
Families: Qwen3 and Qwen3-MoE (its transformers-5 save with the experts fused, so R8 composes too;
its experts are the engine's FusedMoE, given a CPU path on this CPU build by R11). Granite,
OLMo 2, Gemma 3 and EXAONE 4 are proven by their conformance cells (conformance/results.json);
EXAONE 4's layers are also built here, to show each takes its own window and rotary embedding.
1. vanilla 0.5.5 refuses the class (`Model architectures [...] are not supported for now`), and
   triage names R10;
2. the iluvatar-bi100 launcher (the engine's Python runs `common launch`) registers the backport
   through the compat plugin and serves the author's greedy tokens (transformers' own `generate`,
   float32 on both sides); chat answers; the model directory is untouched;
3. `doctor --card iluvatar-bi100`, verified with the engine's Python, says it starts with R10;
   a family with no backport (SmolLM3) still fails with "needs a newer engine".

Each vLLM start costs 15-30 s on two cores: one server per model, every assertion on it.
"""

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from common.triage import triage_file
from common.vllm_plugin.compat_backports import ENV
from harness.cores import ranks_env
from harness.engine import ENGINE_055, ROOT, free_port
from harness.fixtures.factory import author_record, build

ENGINE = ENGINE_055
CARD = "iluvatar-bi100"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE.available(), reason=ENGINE.missing_reason),
]

# float32 as the reference `generate`; 0.5.5 reports token ids only with the server flag.
GREEDY = ["--dtype", "float32", "--return-tokens-as-token-ids"]
SEEDED = ("generic", "--initializer-range", "0.1", "--random-norms", "--reference-tokens", "16")
# Backported family (build_model.py's model type) -> its architecture.
FAMILIES = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
# What transformers 5 adds for a family: Qwen3-MoE with its experts stored fused, as MoE
# checkpoints released after v5 are (R8 splits them for the backport's per-expert MLPs).
V5_EXTRA = {"qwen3_moe": ("--fused-experts",)}
V5_CODES = {"qwen3_moe": {"R8", "R11"}}
# What the engine's CPU build adds: the backport's experts are the engine's FusedMoE, whose CPU
# path R11 gives it (on the card the vendor's kernel runs them).
CPU_BUILD_CODES = {"qwen3_moe": ["R11"]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    base = tmp_path_factory.mktemp("backports")
    cache: Dict[tuple, Path] = {}

    def get(family: str, saved_by: str) -> Path:
        if (family, saved_by) not in cache:
            extra = V5_EXTRA.get(family, ()) if saved_by == "v5" else ()
            cache[family, saved_by] = build(saved_by, SEEDED[0], base / f"{family}-{saved_by}", *SEEDED[1:], "--model-type", family, *extra)
        return cache[family, saved_by]

    return get


def digest(model: Path) -> Dict[str, str]:
    """Every file of the model directory and its sha256: what "untouched" is checked against."""
    return {str(p.relative_to(model)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(model.rglob("*")) if p.is_file()}


def served_name(report: dict, model: Path) -> str:
    args = report.get("args", [])
    return args[args.index("--served-model-name") + 1] if "--served-model-name" in args else str(model)


def run_common(*args: str, work: Path) -> subprocess.CompletedProcess:
    """`python -m common ARGS` under the engine's Python, verified with it (as inside the image)."""
    env = dict(ENGINE.env(), COMPAT_ENGINE_PYTHON=str(ENGINE.python), COMPAT_WORK_DIR=str(work))
    return subprocess.run([str(ENGINE.python), "-m", "common", *args], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_vanilla_refuses_the_family_and_triage_says_r10(models, server, family):
    model = models(family, "455")
    srv = server(ENGINE.serve_argv_vanilla(model, free_port()), ENGINE.env(), "vanilla")
    assert srv.wait_ready() is False
    srv.wait_exit()  # 0.5.5's frontend exits 0 when its engine died during start-up: the log tells
    assert f"ValueError: Model architectures ['{FAMILIES[family]}'] are not supported for now." in srv.log()
    assert triage_file(str(srv.log_path)).code == "R10"


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_launcher_serves_the_backport_with_the_authors_tokens(models, tmp_path, launched, family):
    model = models(family, "455")
    before = digest(model)
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY)
    codes = [r["code"] for r in report["repairs"]]
    assert codes == ["R10"] + CPU_BUILD_CODES.get(family, []) and all(r["verified"] for r in report["repairs"]), report
    assert report["env"][ENV] == f"{FAMILIES[family]}:{family}" and report["args"] == [], report
    assert f"compat_weights: registered the backport of {FAMILIES[family]}" in srv.log()
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
    assert got == author["reference_tokens"]
    status, body = srv.chat(str(model))
    assert status == 200 and body["choices"][0]["message"]["role"] == "assistant", body
    assert digest(model) == before


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_launcher_composes_the_backport_with_the_transformers5_repairs(models, tmp_path, launched, family):
    """Saved by transformers 5: the tokenizer (R3, R3b) and config (R5) repairs (and R8's split of
    fused experts) and the backport on one start, with transformers 5's greedy tokens."""
    model = models(family, "v5")
    before = digest(model)
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY)
    codes = {r["code"] for r in report["repairs"]}
    assert {"R3", "R3b", "R5", "R10"} | V5_CODES.get(family, set()) <= codes and all(r["verified"] for r in report["repairs"]), report
    name = served_name(report, model)
    got = srv.greedy_tokens(name, author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
    assert got == author["reference_tokens"]
    status, body = srv.chat(name)
    assert status == 200, body
    assert digest(model) == before


def test_the_image_serves_a_backport_sharded_over_two_ranks_with_the_authors_tokens(models, tmp_path, launched):
    """The platform's --tensor-parallel-size 2, as the image runs it (the launcher execs `vllm
    serve`, the plugin loads in every rank): Qwen3-MoE saved by transformers 5, its experts fused
    (R8), served through the backport (R10) and R11's CPU experts, each rank holding half the
    heads and half of every expert, gives transformers 5's greedy tokens."""
    model = models("qwen3_moe", "v5")
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY, "--tensor-parallel-size", "2", env=ranks_env(2), exec_=True)
    assert {"R8", "R10", "R11"} <= {r["code"] for r in report["repairs"] if r["verified"]}, report
    assert "tensor_parallel_size=2" in srv.log() and "(VllmWorkerProcess pid=" in srv.log()
    got = srv.greedy_tokens(served_name(report, model), author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
    assert got == author["reference_tokens"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_doctor_says_the_family_starts_with_its_backport(models, tmp_path, family):
    doctor = run_common("doctor", str(models(family, "455")), "--card", CARD, "--json", work=tmp_path / "work")
    data = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and data["verdict"] == "starts", doctor.stdout[-3000:]
    [r10] = [r for r in data["repairs"] if r["code"] == "R10"]
    assert r10["verified"] is True and "layer APIs the backport calls" in r10["verification"], r10
    assert [r["code"] for r in data["repairs"]] == ["R10"] + CPU_BUILD_CODES.get(family, [])
    assert data["findings"] == [] or all(f["severity"] == "info" for f in data["findings"]), data["findings"]


def test_doctor_says_a_family_without_a_backport_needs_a_newer_engine(tmp_path):
    model = build("455", "generic", tmp_path / "smollm3", "--model-type", "smollm3", "--no-weights")
    doctor = run_common("doctor", str(model), "--card", CARD, "--json", work=tmp_path / "work")
    data = json.loads(doctor.stdout)
    assert doctor.returncode == 1 and data["verdict"] == "fails", doctor.stdout[-3000:]
    [r4] = [f for f in data["findings"] if f["code"] == "R4"]
    assert r4["severity"] == "error" and "SmolLM3ForCausalLM" in r4["message"] and "needs a newer engine" in r4["message"]
    assert not data["repairs"] or "R10" not in {r["code"] for r in data["repairs"]}


def test_the_plugin_registers_nothing_unless_asked(tmp_path):
    """With the plugin on PYTHONPATH but COMPAT_BACKPORTS unset, the engine's registry is its own
    (the launcher tests show the registration when asked)."""
    from common.rules.support.plugin import PLUGIN_DIR

    code = (
        "from vllm.plugins import load_general_plugins; from vllm import ModelRegistry; load_general_plugins(); "
        "print('Qwen3ForCausalLM' in ModelRegistry.get_supported_archs())"
    )
    env = dict(ENGINE.env(), PYTHONPATH=PLUGIN_DIR)
    env.pop(ENV, None)
    out = subprocess.run([str(ENGINE.python), "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "False", out.stderr[-2000:]
    assert "Loaded general plugin: compat_weights" in out.stdout  # loaded, and asked for nothing


# EXAONE 4's layers built by the engine's Python: which rotate, which window each Attention got.
EXAONE4_LAYERS = """
import json, sys
sys.path.insert(0, sys.argv[1])
from transformers import Exaone4Config
from vllm.config import CacheConfig
from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment
init_distributed_environment(1, 0, f"tcp://127.0.0.1:{sys.argv[2]}", 0, "gloo")
ensure_model_parallel_initialized(1, 1)
from compat_backports.exaone4 import Exaone4ForCausalLM
out = []
for window, types, engine_window in json.loads(sys.argv[3]):
    config = Exaone4Config(vocab_size=64, hidden_size=128, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, sliding_window=window, layer_types=types)
    try:
        model = Exaone4ForCausalLM(config, CacheConfig(16, 0.9, 0, "auto", sliding_window=engine_window))
        out.append([[layer.self_attn.rotates, layer.self_attn.attn.impl.sliding_window] for layer in model.model.layers])
    except ValueError as exc:
        out.append(str(exc))
print("LAYERS " + json.dumps(out))
"""


def test_exaone4_layers_take_their_window_and_rope_from_the_config():
    """As transformers' modeling_exaone4.py: with a window, only the windowed layers rotate and
    each keeps its own window; without one (the 1.2B) every layer rotates, globally. An engine
    that still applies the model-wide window to a global layer is refused, not served wrong."""
    from common.rules.support.plugin import PLUGIN_DIR

    hybrid = ["sliding_attention", "full_attention"]
    cases = [[12, hybrid, None], [None, ["full_attention"] * 2, None], [12, hybrid, 12]]
    argv = [str(ENGINE.python), "-c", EXAONE4_LAYERS, PLUGIN_DIR, str(free_port()), json.dumps(cases)]
    proc = subprocess.run(argv, cwd=str(ROOT), env=ENGINE.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("LAYERS ")]
    hybrid_layers, global_layers, refused = json.loads(line[len("LAYERS ") :])
    assert hybrid_layers == [[True, 12], [False, None]]
    assert global_layers == [[True, None], [True, None]]
    assert "use_sliding_window: false" in refused
