"""Qwen3.5 on real vLLM 0.5.5 (the BI-100 engine generation, built for the CPU), through the
iluvatar-bi100 launcher: the Gated DeltaNet hybrid's backport keeps each sequence's recurrent
state across steps, and its tokens are the author's however the engine batches.

The model: a tiny Qwen3_5ForCausalLM saved by transformers 5 (three Gated DeltaNet layers and one
gated attention layer, every norm drawn at random). The author's greedy tokens come from
transformers 5's own `generate` (float32, one prompt at a time: its chunked form over the prompt,
its recurrent form after). Prompts of 9 to 100 tokens: the longest crosses the backport's 64-token
chunk. The engine is started as the platform would start it plus three limits that make it batch
hard: two sequences at a time (--max-num-seqs 2), and a KV cache of 11 blocks of 16 tokens, too
few for two 60- and 50-token prompts to decode 32 tokens each side by side: the scheduler preempts
one and recomputes it from its tokens later (its state is cleared and rebuilt, never reused).
1. vanilla 0.5.5 refuses the model (its transformers has no `qwen3_5_text` config class);
2. through the launcher: each prompt alone, two of different lengths at once, and all five at once
   (more than the engine runs at a time, so requests wait, finish and free their state slots)
   give the author's tokens; the engine's log shows the preemption by recomputation. On one
   device, and at the platform's --tensor-parallel-size 2 (the launcher exec'ing `vllm serve`,
   each rank keeping its half of the heads' states from the request ids the first rank broadcasts);
3. `doctor --card iluvatar-bi100` says it starts, with the backport (R10) and the config class
   (R12), and --enforce-eager.
"""

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List

import pytest

from common.triage import triage_file
from harness.cores import ranks_env
from harness.engine import ENGINE_055, ROOT, free_port
from tests.e2e.qwen35_author import NEW_TOKENS, author_fixture, digest, model_fixture, prompts_fixture  # noqa: F401 - fixtures

ENGINE = ENGINE_055
CARD = "iluvatar-bi100"
TIGHT = ["--max-model-len", "160", "--max-num-seqs", "2", "--block-size", "16", "--num-gpu-blocks-override", "11"]
GREEDY = ["--dtype", "float32", "--return-tokens-as-token-ids"]

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE.available(), reason=ENGINE.missing_reason),
]


def run_common(*args: str, work: Path) -> subprocess.CompletedProcess:
    env = dict(ENGINE.env(), COMPAT_ENGINE_PYTHON=str(ENGINE.python), COMPAT_WORK_DIR=str(work))
    return subprocess.run([str(ENGINE.python), "-m", "common", *args], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)


def test_vanilla_refuses_the_model(model, server):
    srv = server(ENGINE.serve_argv_vanilla(model, free_port()), ENGINE.env(), "vanilla")
    assert not srv.wait_ready(), "vanilla vLLM 0.5.5 served a Qwen3.5 model"
    assert "qwen3_5_text" in srv.log(), srv.log()[-3000:]
    assert triage_file(str(srv.log_path)).code != "unknown", srv.log()[-3000:]


@pytest.mark.parametrize("tp", [1, 2])
def test_launcher_serves_the_authors_tokens_however_the_engine_batches(model, prompts, author, tmp_path, launched, tp):
    before = digest(model)
    if tp == 1:
        srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY, *TIGHT)
    else:
        sharded = ["--tensor-parallel-size", str(tp)]
        srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY, *TIGHT, *sharded, env=ranks_env(tp), exec_=True)
        assert f"tensor_parallel_size={tp}" in srv.log() and "(VllmWorkerProcess pid=" in srv.log()
    codes = [r["code"] for r in report["repairs"]]
    assert {"R10", "R12"} <= set(codes) and all(r["verified"] for r in report["repairs"]), report
    assert "--enforce-eager" in report["args"], report
    assert "recurrent state: vllm.worker.cpu_model_runner.CPUModelRunner hands a model with inner state its requests" in srv.log()
    args = report.get("args", [])
    name = args[args.index("--served-model-name") + 1] if "--served-model-name" in args else str(model)

    def greedy(i: int) -> List[int]:
        return srv.greedy_tokens(name, prompts[i], NEW_TOKENS, ids_in_request=False)

    alone = [greedy(i) for i in range(len(prompts))]
    with ThreadPoolExecutor(2) as pool:
        pair = list(pool.map(greedy, [2, 3]))  # 60 and 50 tokens: one is preempted and recomputed
    with ThreadPoolExecutor(len(prompts)) as pool:
        crowd = list(pool.map(greedy, range(len(prompts))))  # five requests, two run at a time
    expected: Dict[str, List[List[int]]] = {"alone": author, "pair": [author[2], author[3]], "crowd": author}
    assert {"alone": alone, "pair": pair, "crowd": crowd} == expected
    assert "preempted by PreemptionMode.RECOMPUTE" in srv.log(), "no preemption happened: the test did not test recomputation"
    assert digest(model) == before  # the model directory is never written


def test_doctor_says_it_starts_with_the_backport(model, tmp_path):
    doctor = run_common("doctor", str(model), "--card", CARD, "--json", work=tmp_path / "work")
    data = json.loads(doctor.stdout)
    assert doctor.returncode == 0 and data["verdict"] == "starts", doctor.stdout[-3000:]
    codes = [r["code"] for r in data["repairs"]]
    assert {"R10", "R12"} <= set(codes) and all(r["verified"] for r in data["repairs"]), data["repairs"]
    assert "--enforce-eager" in data["args"], data["args"]
