"""The engine venv's CPU attention-groups harness patch (envs/engine/cpu_attention_groups.py) on
the real upstream vLLM 0.11.0 file: the edit lands once, again is a no-op, another vLLM's file is
refused before it is written, and the runner's reorder then hands the first builder's count of
prompts to every other attention group's builder. That the engine then serves the author's tokens
of a model with several attention groups is the Gemma 4 cases' conformance cells on 0.11.0."""

import ast
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.unit import harness_patch_files

from common.tests.helpers import ROOT

UPSTREAM = ROOT / ".upstream" / "vllm-0_11_0" / "vllm"
FILE = "v1/worker/cpu_model_runner.py"
pytestmark, package = harness_patch_files.upstream_package(UPSTREAM, [FILE])
patch_module = partial(harness_patch_files.load, ROOT / "envs" / "engine" / "cpu_attention_groups.py")


def may_reorder_batch(path: Path):
    """The patched CPUModelRunner._may_reorder_batch, compiled alone with stand-ins for its names."""
    text = path.read_text()
    [runner] = [n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == "CPUModelRunner"]
    [fn] = [n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == "_may_reorder_batch"]
    source = "\n".join(line[4:] for line in ast.get_source_segment(text, fn, padded=True).splitlines())

    class Builder:
        def __init__(self, prompts=0):
            self.num_prompt_req = prompts

        def reorder_batch(self, batch, scheduler_output):
            self.num_prompt_req = batch.prompts

    scope = {"TorchSDPAMetadataBuilderV1": Builder}
    exec(compile(source, str(path), "exec"), scope)  # noqa: S102 - the engine's own function, on stand-ins
    return scope["_may_reorder_batch"], Builder


def test_the_edit_lands_once_and_again_is_a_no_op(package):
    patch = patch_module()
    assert patch.apply(package) == f"{FILE} edited"
    edited = (package / FILE).read_text()
    assert patch.apply(package) == f"{FILE} already edited" and (package / FILE).read_text() == edited
    compile(edited, FILE, "exec")


def test_every_attention_groups_builder_learns_the_prompts(package):
    patch_module().apply(package)
    reorder, Builder = may_reorder_batch(package / FILE)
    first, wider, narrower = Builder(), Builder(), Builder()
    groups = [SimpleNamespace(metadata_builders=[b]) for b in (first, wider, narrower)]
    runner = SimpleNamespace(
        kv_cache_config=SimpleNamespace(kv_cache_groups=[object()]), attn_groups=[groups], input_batch=SimpleNamespace(prompts=2)
    )
    reorder(runner, None)
    assert [b.num_prompt_req for b in (first, wider, narrower)] == [2, 2, 2]
    # The shipped runner tells the first group only: the others treat the prompts as decodes.
    shipped, Builder = may_reorder_batch(UPSTREAM / FILE)
    first, wider = Builder(), Builder()
    runner.attn_groups = [[SimpleNamespace(metadata_builders=[b]) for b in (first, wider)]]
    shipped(runner, None)
    assert (first.num_prompt_req, wider.num_prompt_req) == (2, 0)


def test_another_vllms_file_is_refused_before_it_is_written(package):
    path = package / FILE
    path.write_text(path.read_text().replace("mb[0].reorder_batch(", "mb[0].reorder(", 1))
    before = path.read_text()
    with pytest.raises(ValueError, match="anchor not found exactly once"):
        patch_module().apply(package)
    assert path.read_text() == before
