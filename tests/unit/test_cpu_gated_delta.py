"""The engine venv's CPU Gated DeltaNet harness patch (envs/engine/cpu_gated_delta.py) on the real
upstream vLLM 0.11.0 files: each edit lands exactly once, again is a no-op, the stand-in module is
written beside the package, and another vLLM's files are refused before anything is written. Its
stand-ins keep the kernels' bookkeeping (sequences one after another, each state in its slot of
the engine's cache, updated in place), checked in the engine venv: a prompt run in two chunks and
decode steps, its sequences in permuted slots, computes what one pass over it does. That the
patched engine serves the author's tokens is the conformance matrix's 0.11 cells of Qwen3-Next
and Qwen3.5."""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit import harness_patch_files

from common.tests.helpers import ROOT

UPSTREAM = ROOT / ".upstream" / "vllm-0_11_0-gdn" / "vllm"
PATCH = ROOT / "envs" / "engine" / "cpu_gated_delta.py"
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"


def patch_module():
    return harness_patch_files.load(PATCH)


def files():
    return sorted({rel for rel, _, _ in patch_module().EDITS})


@pytest.fixture
def package(tmp_path: Path) -> Path:
    if not (UPSTREAM / files()[0]).exists():
        pytest.skip("no upstream sources: run `make upstream-src`")
    root = tmp_path / "vllm"
    for rel in files():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(UPSTREAM / rel, root / rel)
    return root


def test_each_edit_lands_once_and_again_is_a_no_op(package):
    patch = patch_module()
    module = f"{patch.MODULE}.py written"
    assert patch.apply(package) == [f"{rel} edited" for rel, _, _ in patch.EDITS] + [module]
    edited = {rel: (package / rel).read_text() for rel in files()}
    assert patch.apply(package) == [f"{rel} already edited" for rel, _, _ in patch.EDITS] + [module]
    assert {rel: (package / rel).read_text() for rel in files()} == edited
    assert (package.parent / f"{patch.MODULE}.py").read_text() == PATCH.read_text()
    for rel, text in edited.items():
        compile(text, rel, "exec")  # still Python

    # The engine's kernels stay bound on a card; the stand-ins only on the CPU platform, last.
    qwen3_next = ast.parse(edited["model_executor/models/qwen3_next.py"])
    last = qwen3_next.body[-1]
    assert isinstance(last, ast.If) and ast.unparse(last.test) == "current_platform.is_cpu()"
    rebound = {alias.name for node in last.body for alias in node.names}
    assert rebound == {
        "RMSNormGated",
        "causal_conv1d_fn",
        "causal_conv1d_update",
        "chunk_gated_delta_rule",
        "fused_gdn_gating",
        "fused_recurrent_gated_delta_rule",
    }


def test_another_vllms_files_are_refused_before_anything_is_written(package):
    patch = patch_module()
    runner = package / "v1" / "worker" / "cpu_model_runner.py"
    runner.write_text(runner.read_text().replace("Multiple KVCacheGroups is not", "Several KV cache groups are not"))
    before = {rel: (package / rel).read_text() for rel in files()}
    with pytest.raises(ValueError, match="anchor not found exactly once"):
        patch.apply(package)
    assert {rel: (package / rel).read_text() for rel in files()} == before
    assert not (package.parent / f"{patch.MODULE}.py").exists()


# Run by the engine venv's Python: the stand-ins loaded from the harness file, on random inputs
# shaped as Qwen3-Next's layer hands them (2 key heads serving 4 value heads, two sequences).
STAND_IN_CHECK = r"""
import importlib.util, sys
import torch
spec = importlib.util.spec_from_file_location("enginex_cpu_gated_delta", sys.argv[1])
gdn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gdn)
torch.manual_seed(0)
H, HV, K, V, C, W = 2, 4, 8, 8, 12, 4
lengths, slots = [7, 6], torch.tensor([3, 1])
T = sum(lengths)
q, k = torch.randn(1, T, H, K), torch.randn(1, T, H, K)
v, g, beta = torch.randn(1, T, HV, V), -torch.rand(1, T, HV), torch.rand(1, T, HV)
x, weight = torch.randn(C, T), torch.randn(C, W)

def starts(ls):
    return torch.tensor([0] + torch.tensor(ls).cumsum(0).tolist())

def cache():
    # What a slot holds before a new sequence takes it: an earlier sequence's states.
    return torch.randn(5, C, W - 1), torch.randn(5, HV, K, V)

def one_pass():
    conv_states, _ = cache()
    out = gdn.causal_conv1d_fn(x, weight, None, conv_states, starts(lengths), slots, torch.tensor([False, False]))
    o, final = gdn.chunk_gated_delta_rule(q, k, v, g, beta, initial_state=torch.zeros(2, HV, K, V), output_final_state=True, cu_seqlens=starts(lengths), use_qk_l2norm_in_kernel=True)
    return out, o, conv_states[slots], final

def in_steps():
    # The first 3 and 2 tokens as prompts, 2 more each as a chunk continuing them, then the rest
    # token by token as decode steps: the token order of a batch, sequence after sequence.
    conv_states, states = cache()
    out, o = torch.empty_like(x), torch.empty_like(v)
    begin = [0, lengths[0]]
    done = [0, 0]
    def run(counts, decode):
        idx = [list(range(begin[s] + done[s], begin[s] + done[s] + n)) for s, n in enumerate(counts)]
        flat = [i for part in idx for i in part]
        if decode:
            y = gdn.causal_conv1d_update(x[:, flat].t(), conv_states, weight, None, "silu", conv_state_indices=slots)
            r, _ = gdn.fused_recurrent_gated_delta_rule(q[:, flat], k[:, flat], v[:, flat], g[:, flat], beta[:, flat], initial_state=states, cu_seqlens=starts(counts), ssm_state_indices=slots, use_qk_l2norm_in_kernel=True)
            out[:, flat], o[:, flat] = y.t(), r
        else:
            has = torch.tensor([d > 0 for d in done])
            out[:, flat] = gdn.causal_conv1d_fn(x[:, flat], weight, None, conv_states, starts(counts), slots, has)
            init = states[slots].clone()
            init[~has] = 0
            r, final = gdn.chunk_gated_delta_rule(q[:, flat], k[:, flat], v[:, flat], g[:, flat], beta[:, flat], initial_state=init, output_final_state=True, cu_seqlens=starts(counts), use_qk_l2norm_in_kernel=True)
            states[slots] = final
            o[:, flat] = r
        for s, n in enumerate(counts):
            done[s] += n
    run([3, 2], False)
    run([2, 2], False)
    while done != lengths:
        run([1, 1], True)
    return out, o, conv_states[slots], states[slots]

for a, b in zip(one_pass(), in_steps()):
    assert torch.allclose(a, b, atol=1e-5), (a - b).abs().max()
print("ok")
"""


@pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="needs .venv-engine: run `make engine-env`")
def test_stand_ins_keep_each_sequence_state_in_its_slot(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(STAND_IN_CHECK)
    done = subprocess.run([str(ENGINE_PYTHON), str(script), str(PATCH)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
