"""Per-layer sliding windows and soft caps on vLLM 0.5.5's CPU attention
(common/vllm_plugin/compat_patches/cpu_windows.py), held on the engine's own torch_sdpa implementation and
paged cache (tests/cpu_windows_probe.py).

A windowed layer and a global layer, each also soft-capped as Gemma 2's, over one batch of two
sequences whose windows start inside a block, on block tables out of order: prefill and one
decode step, each against attention with the author's mask and cap. The engine alone fails every
way the backports would meet: its prefill hands the first layer's window mask to the global layer
(which then raises), its decode ignores the window, and its constructor refuses a soft cap. With
the plugin's wrappers every step equals the reference. Gemma 2's, Gemma 3's and the model-wide
windows' conformance cells on 0.5.5 prove the same through the launcher (conformance/results.json).
"""

import json
import subprocess

import pytest

from common.rules.support.plugin import PLUGIN_DIR
from harness.engine import ENGINE_055, ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(not ENGINE_055.available(), reason=ENGINE_055.missing_reason)]

PROBE = ROOT / "tests" / "cpu_windows_probe.py"
EXACT = 1e-5  # float32 attention, the same operations in another order


def probe(mode: str) -> dict:
    proc = subprocess.run(
        [str(ENGINE_055.python), str(PROBE), PLUGIN_DIR, mode], env=ENGINE_055.env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_each_layer_attends_over_its_own_window_in_prefill_and_decode():
    errors = probe("patched")
    layers = ("windowed", "global", "capped_windowed", "capped_global")
    assert set(errors) == {f"{step}_{layer}" for step in ("prefill", "decode") for layer in layers}
    assert all(isinstance(e, float) and e < EXACT for e in errors.values()), errors


def test_the_engine_alone_serves_a_windowed_and_a_global_layer_wrong():
    errors = probe("vanilla")
    assert errors["prefill_windowed"] < EXACT  # the first layer's window is the batch's mask...
    assert errors["prefill_global"] == "RuntimeError"  # ...which the global layer then gets
    assert errors["decode_windowed"] > 0.01  # decode reads the whole context
    assert errors["prefill_capped_windowed"] == errors["prefill_capped_global"] == "ValueError"  # "does not support logits soft cap"
