"""Per-layer sliding windows, soft caps and attention sinks on vLLM 0.11.0's CPU attention, as the
engine venv's harness patch (envs/engine/cpu_windows.py) teaches them, held on the engine's own
TorchSDPA implementation and paged cache (tests/cpu_windows_probe_vllm011.py).

A windowed layer and a global layer, each also soft-capped as Gemma 2's and with sinks as
GPT-OSS's, over two sequences whose windows start inside a block, on block tables out of order, in
the three steps V1 schedules: a chunked prefill, the rest of a prompt beside a decode, a decode;
each against attention with the author's mask, cap and sinks. The engine as 0.11.0 ships it (the
sdist's file, loaded beside the venv's) fails every way those families would meet: its chunked
prefill asserts that no layer needs a mask, its decode reads the whole context, it ignores a soft
cap and refuses sinks; its global layer is the probe's control, the same in both. The windowed
cases' conformance cells on 0.11.0 prove the same through the launcher (conformance/results.json).
"""

import pytest

from harness.engine import ENGINE_0110, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not ENGINE_0110.available(), reason=ENGINE_0110.missing_reason)]

PROBE = ROOT / "tests" / "cpu_windows_probe_vllm011.py"
UPSTREAM = ROOT / ".upstream" / "vllm-0_11_0" / "vllm" / "v1" / "attention" / "backends" / "cpu_attn.py"
EXACT = 1e-5  # float32 attention, the same operations in another order
STEPS = ("prefill", "chunked", "decode")
LAYERS = ("windowed", "global", "capped_windowed", "capped_global", "sinks_windowed", "sinks_global")


@pytest.fixture(scope="module")
def errors() -> dict:
    if not UPSTREAM.exists():
        pytest.skip("no upstream sources: run `make upstream-src`")
    return ENGINE_0110.probe(PROBE, {"upstream": str(UPSTREAM)})


def test_each_layer_attends_over_its_own_window_cap_and_sinks_in_every_step(errors):
    patched = errors["patched"]
    assert set(patched) == {f"{step}_{layer}" for step in STEPS for layer in (*LAYERS, "windowed_vllm_layout")}
    assert all(isinstance(e, float) and e < EXACT for e in patched.values()), patched


def test_the_engine_as_shipped_serves_windows_and_caps_wrong(errors):
    vanilla = errors["vanilla"]
    assert all(vanilla[f"{step}_global"] < EXACT for step in STEPS)  # the control: the engine's own path
    for step in ("prefill", "chunked"):  # "assert not self.need_mask" in the chunked prefill
        assert vanilla[f"{step}_windowed"] == vanilla[f"{step}_capped_windowed"] == "AssertionError", vanilla
    assert vanilla["decode_windowed"] > 0.01  # the whole context, not the window
    assert all(vanilla[f"{step}_capped_global"] > 0.01 for step in STEPS)  # the cap dropped
    assert all(vanilla[f"{step}_sinks_{kind}"] == "TypeError" for step in STEPS for kind in ("windowed", "global"))  # no sinks argument
