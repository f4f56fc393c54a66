"""The engine venv's CPU sliding-window harness patch (envs/engine/cpu_windows.py) on the real
upstream vLLM 0.11.0 files: each edit lands exactly once, again is a no-op, and another vLLM's
files are refused before anything is written. That the patched attention computes the author's
window and cap is tests/e2e/vllm011/test_cpu_windows_vllm011.py (the engine's own attention class
and paged cache), and that the engine then serves the author's tokens is the windowed cases'
conformance cells on 0.11.0."""

from functools import partial
from pathlib import Path

import pytest

from tests.unit import harness_patch_files

ROOT = Path(__file__).resolve().parents[2]

UPSTREAM = ROOT / ".upstream" / "vllm-0_11_0" / "vllm"
FILES = ("engine/arg_utils.py", "platforms/cpu.py", "v1/attention/backends/cpu_attn.py")
pytestmark, package = harness_patch_files.upstream_package(UPSTREAM, FILES)
patch_module = partial(harness_patch_files.load, ROOT / "envs" / "engine" / "cpu_windows.py")
function_source = harness_patch_files.function_source


def test_each_edit_lands_once_and_again_is_a_no_op(package):
    edited = harness_patch_files.edits_land_once(patch_module(), package, FILES)
    for rel in FILES:
        compile(edited[rel], rel, "exec")  # still Python

    # The V1 oracle no longer turns a windowed model away on the CPU (and nothing else it checks changed).
    oracle, shipped = (function_source(root / FILES[0], "_is_v1_supported_oracle", "EngineArgs") for root in (package, UPSTREAM))
    assert "sliding window (CPU backend)" not in oracle and "sliding window (CPU backend)" in shipped
    assert oracle.count("_raise_or_fallback(") == shipped.count("_raise_or_fallback(") - 1
    # A windowed model keeps one KV cache group on the CPU.
    platform = function_source(package / FILES[1], "check_and_update_config", "CpuPlatform")
    one_group = "if model_config.get_sliding_window() is not None:\n                vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = True"
    assert one_group in platform
    # A decoder layer with a window, a soft cap or sinks attends by hand, after its keys and values are in the cache.
    attn = package / FILES[2]
    forward = function_source(attn, "forward", "TorchSDPABackendImpl")
    assert forward.index("write_to_paged_cache(") < forward.index("return _compat_attend(") < forward.index("flash_attn_varlen_func(")
    init = function_source(attn, "__init__", "TorchSDPABackendImpl")
    assert "sinks: Optional[torch.Tensor] = None," in init and "self.sinks = sinks" in init
    assert "self.logits_soft_cap = logits_soft_cap" in init
    assert "does not support logits soft cap" not in attn.read_text()
    assert "allowed &= pos_k > pos_q - window" in function_source(attn, "_compat_attend")


def test_another_vllms_files_are_refused_before_anything_is_written(package):
    patch = patch_module()
    attn = package / FILES[2]
    attn.write_text(attn.read_text().replace("def _get_paged_attn_impl():", "def _paged_attn_impl():"))
    before = {rel: (package / rel).read_text() for rel in FILES}
    with pytest.raises(ValueError, match="anchor not found exactly once"):
        patch.apply(package)
    assert {rel: (package / rel).read_text() for rel in FILES} == before
