"""Qwen3.5 on real vLLM 0.11 (the nv-a100 and hygon-k100 engine generation, its CPU build), through
the nv-a100 launcher: the backport written for the V1 engine's model API (the engine's own
Qwen3-Next layers, each sequence's state in the engine's own cache) serves the author's tokens
however the engine batches.

The model: a tiny Qwen3_5ForCausalLM saved by transformers 5 (three Gated DeltaNet layers and one
gated attention layer, every norm drawn at random). The author's greedy tokens come from
transformers 5's own `generate` (float32, one prompt at a time). Prompts of 9 to 100 tokens. The
engine is started as the platform would start it plus two limits that make it batch hard: two
sequences at a time (--max-num-seqs 2) and 32 tokens a step (--max-num-batched-tokens 32), so a
long prompt is prefilled in chunks that continue its state, beside another sequence's decode steps.
1. vanilla 0.11 refuses the model (its transformers has no `qwen3_5_text` config class);
2. through the launcher: each prompt alone, two of different lengths at once, and all five at once
   (more than the engine runs at a time, so requests wait, finish and hand their state slots on)
   give the author's tokens. On one device, and at the platform's --tensor-parallel-size 2 (each
   rank its share of the DeltaNet heads and of their states). On this CPU the engine venv's
   harness patch runs the Gated DeltaNet kernels' stand-in (envs/engine/cpu_gated_delta.py);
3. `doctor --card nv-a100` says it starts, with the backport (R10) and the config class (R12), and
   no --enforce-eager (the states are the engine's: its CUDA graphs read their slots).
"""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

import pytest

from common.triage import triage_file
from harness.cores import ranks_env
from harness.engine import ENGINE_0110, ROOT, free_port
from tests.e2e.qwen35_author import NEW_TOKENS, author_fixture, digest, model_fixture, prompts_fixture  # noqa: F401 - fixtures

ENGINE = ENGINE_0110
CARD = "nv-a100"
TIGHT = ["--max-model-len", "160", "--max-num-seqs", "2", "--max-num-batched-tokens", "32", "--enforce-eager"]
GREEDY = ["--dtype", "float32", "--return-tokens-as-token-ids"]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE.available(), reason=ENGINE.missing_reason),
]


def test_vanilla_refuses_the_model(model, server):
    srv = server(ENGINE.serve_argv_vanilla(model, free_port()), ENGINE.env(), "vanilla")
    assert not srv.wait_ready(), "vanilla vLLM 0.11 served a Qwen3.5 model"
    assert "qwen3_5_text" in srv.log(), srv.log()[-3000:]
    assert triage_file(str(srv.log_path)).code != "unknown", srv.log()[-3000:]


@pytest.mark.parametrize("tp", [1, 2])
def test_launcher_serves_the_authors_tokens_however_the_engine_batches(model, prompts, author, tmp_path, launched, tp):
    before = digest(model)
    if tp == 1:
        srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY, *TIGHT)
    else:  # the launcher exec'ing `vllm serve`, whose ranks are processes of their own
        sharded = ["--tensor-parallel-size", str(tp)]
        srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY, *TIGHT, *sharded, env=ranks_env(tp), exec_=True)
        assert f"tensor_parallel_size={tp}" in srv.log(), srv.log()[-3000:]
    codes = [r["code"] for r in report["repairs"]]
    assert {"R10", "R12"} <= set(codes) and all(r["verified"] for r in report["repairs"]), report
    assert "Qwen3_5ForCausalLM:qwen3_5_v1" in json.dumps(report["env"]), report
    assert "registered the backport of Qwen3_5ForCausalLM (compat_backports.qwen3_5_v1)" in srv.log()
    args = report.get("args", [])
    name = args[args.index("--served-model-name") + 1] if "--served-model-name" in args else str(model)

    def greedy(i: int) -> List[int]:
        return srv.greedy_tokens(name, prompts[i], NEW_TOKENS, ids_in_request=False)

    alone = [greedy(i) for i in range(len(prompts))]
    with ThreadPoolExecutor(2) as pool:
        pair = list(pool.map(greedy, [0, 1]))  # a 100-token prompt in chunks beside a short one's decode
    with ThreadPoolExecutor(len(prompts)) as pool:
        crowd = list(pool.map(greedy, range(len(prompts))))  # five requests, two run at a time
    expected: Dict[str, List[List[int]]] = {"alone": author, "pair": [author[0], author[1]], "crowd": author}
    assert {"alone": alone, "pair": pair, "crowd": crowd} == expected
    assert digest(model) == before  # the model directory is never written


def test_doctor_says_it_starts_with_the_v1_backport(model, tmp_path):
    # @next left without its engine: the answer is then the nv-a100 engine's own (vLLM 0.32 has
    # Qwen3.5 itself and would be recommended, with no repair to read here).
    env = dict(
        ENGINE.env(),
        COMPAT_ENGINE_PYTHON=str(ENGINE.python),
        COMPAT_ENGINE_PYTHON_NEXT="/nonexistent/engine-next/python",
        COMPAT_WORK_DIR=str(tmp_path / "work"),
    )
    argv = [str(ENGINE.python), "-m", "common", "doctor", str(model), "--card", CARD, "--json"]
    doctor = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)
    data = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and data["verdict"] == "starts" and data["recommended"] == CARD, doctor.stdout[-3000:]
    codes = [r["code"] for r in data["repairs"]]
    assert {"R10", "R12"} <= set(codes) and all(r["verified"] for r in data["repairs"]), data["repairs"]
    assert "--enforce-eager" not in data["args"], data["args"]
