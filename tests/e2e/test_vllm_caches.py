"""The tests' vLLM caches are given vLLM's model-class inspections before the suite starts
(harness/vllm_caches.py, compat_build/image_steps/bake_modelinfos.py): on the real vLLM 0.11 and
0.32, the bake's entry of an architecture is the one vLLM writes after its own subprocess
inspection, and a start in a baked cache reads it instead of starting that subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.engine import ENGINE_0110, ENGINE_NEXT

pytestmark = pytest.mark.e2e
PROBE = Path(__file__).resolve().parents[1] / "modelinfos_probe.py"


@pytest.mark.parametrize("engine", [ENGINE_0110, ENGINE_NEXT], ids=lambda e: e.version)
def test_the_baked_inspection_is_vllms_own_and_spares_its_subprocess(engine, tmp_path):
    if not engine.available():
        pytest.fail(engine.missing_reason)
    answer = engine.probe(PROBE, {"architecture": "LlamaForCausalLM", "baked": str(tmp_path / "baked"), "own": str(tmp_path / "own")})
    # Every architecture of the registry that imports here, not a handful.
    assert answer["written"] > 100, answer["written"]
    assert answer["subprocesses"] == {"own": 1, "baked": 0}
    assert answer["baked"] == answer["own"]
    assert answer["own"]["modelinfo"]["is_text_generation_model"] is True
