"""A proof is of the code that runs: every committed conformance cell carries the fingerprint of
its case, saver, engine venv and the project files on its start path, and a cell whose code
changed is named stale (conformance/fingerprint.py)."""

from __future__ import annotations

import copy
import json

import pytest

from conformance import fingerprint as fp
from conformance.cases import ENGINES, ROOT, SAVERS, load_cases, tensor_parallel
from conformance.matrix import RESULTS, stale

from common.vllm_plugin.compat_backports import BACKPORTS

CASES = {c["name"]: c for c in load_cases()}
# A fingerprint hashes what each engine and saver venv holds (conformance/fingerprint.py `installed`).
VENVS = sorted({e.venv for e in ENGINES.values()} | {s.venv for s in SAVERS.values()})
needs_venvs = pytest.mark.skipif(
    any(fp.installed(v) == "not built" for v in VENVS), reason="a cell's fingerprint hashes what its venvs hold: run `make envs`"
)


def rel(paths):
    return {str(p.relative_to(ROOT)) for p in paths}


@needs_venvs
def test_every_committed_cell_proves_the_code_that_runs():
    found = stale(json.loads(RESULTS.read_text()))
    listed = "\n".join(found[:30]) + (f"\n... and {len(found) - 30} more" if len(found) > 30 else "")
    assert not found, (
        f"{len(found)} conformance cells do not prove the code as it is:\n{listed}\n"
        "run them again: `make conformance` (only the stale cells; `python -m conformance run --all` for every one)"
    )


def test_a_cells_path_is_its_launcher_repairs_plugin_and_its_own_backport():
    files = rel(fp.path_files("iluvatar-bi100", "Qwen3ForCausalLM"))
    on_path = {
        "common/start/launch.py",
        "common/start/preflight.py",
        "common/rules/r10_backport.py",  # a repair, registered by name
        "common/vllm_plugin/compat_plugin.py",
        "common/vllm_plugin/compat_backports/qwen3.py",  # the architecture's backport
        "common/vllm_plugin/compat_backports/layers/decoder.py",  # what that backport imports
        "common/vllm_plugin/compat_backports/layers/heads.py",  # what a repair imports (R10)
        "common/shims/ixformer/contrib/vllm/layers.py",
        "cards/iluvatar-bi100/card.toml",
        "common/engine/profiles/iluvatar-bi100.json",
        "common/engine/config_names.json",  # a repair's data (R13), which no import shows
        "harness/engine_worker.py",
    }
    assert on_path <= files, on_path - files
    off_path = {
        "common/vllm_plugin/compat_backports/gemma4.py",  # another family's backport
        "common/rules/c1_conformance.py",  # checks only find; the launcher execs whatever they say
        "common/rules/kv_memory.py",
        "common/doctor/doctor.py",
        "common/doctor/model_build_finding.py",
        "cards/nv-a100/card.toml",
    }
    assert not off_path & files, off_path & files
    # A family without a backport has no family's backport on its path.
    families = {f"common/vllm_plugin/compat_backports/{b.module}.py" for generations in BACKPORTS.values() for b in generations}
    assert "common/vllm_plugin/compat_backports/qwen3.py" in families
    assert not families & rel(fp.path_files("nv-a100", "LlamaForCausalLM"))


def test_a_change_on_the_path_changes_the_fingerprint_and_one_off_it_does_not(monkeypatch):
    case, engine = CASES["qwen3"], ENGINES["0.5.5"]
    before = fp.fingerprint(case, "v5", engine, "iluvatar-bi100")
    real = fp._file_hash

    def edited(name):
        def hash_of(path):
            return "edited" if str(path.relative_to(ROOT)) == name else real(path)

        return hash_of

    backports = "common/vllm_plugin/compat_backports"
    for name, changes in (
        (f"{backports}/qwen3.py", True),
        ("common/start/launch.py", True),
        ("cards/iluvatar-bi100/card.toml", True),
        ("envs/engine055/install.sh", False),  # the venv's spec counts through venv_spec, below
        (f"{backports}/gemma4.py", False),
        ("common/doctor/doctor.py", False),
    ):
        monkeypatch.setattr(fp, "_file_hash", edited(name))
        assert (fp.fingerprint(case, "v5", engine, "iluvatar-bi100") != before) is changes, name
    monkeypatch.setattr(fp, "_file_hash", real)
    # The saver, the card and the engine venv's spec are part of it too.
    assert fp.fingerprint(case, "455", engine, "iluvatar-bi100") != before
    monkeypatch.setattr(fp, "venv_spec", lambda venv: "another spec")
    assert fp.fingerprint(case, "v5", engine, "iluvatar-bi100") != before


def test_c1s_scope_written_from_the_cells_is_not_part_of_their_fingerprint(tmp_path, monkeypatch):
    source = (ROOT / "common" / "rules" / "support" / "scopes.py").read_text()
    start = source.index("C1_ARCHITECTURES")
    rescoped = source[:start] + source[start:].replace('"LlamaForCausalLM",', '"LlamaForCausalLM", "AnotherForCausalLM",', 1)
    assert rescoped != source
    other = source.replace("R11_MODEL_TYPES", "R11_TYPES", 1)
    paths = {}
    for name, text in (("a", source), ("b", rescoped), ("c", other)):
        paths[name] = tmp_path / f"{name}.py"
        paths[name].write_text(text)
    monkeypatch.setattr(fp, "EXCLUDED_ASSIGNMENTS", {p: "C1_ARCHITECTURES" for p in paths.values()})
    assert fp._source_bytes(paths["a"]) == fp._source_bytes(paths["b"])
    assert fp._source_bytes(paths["a"]) != fp._source_bytes(paths["c"])


def where(cell):
    return f"{cell['variant']} saved by {cell['saved_by']} on {cell['card']}" + (f" at TP {cell['tp']}" if cell["tp"] > 1 else "")


@needs_venvs
def test_stale_names_a_changed_cell_an_unfingerprinted_one_a_case_never_run_and_old_verdicts():
    results = copy.deepcopy(json.loads(RESULTS.read_text()))
    cells = results["cells"]
    changed, bare = cells[0], cells[1]
    changed["fingerprint"] = "0" * 16
    bare.pop("fingerprint", None)
    assert "mixtral" not in (changed["variant"], bare["variant"])
    results["cells"] = [c for c in cells if c["variant"] != "mixtral"]
    found = stale(results)
    assert f"{where(changed)}: its code changed" in found
    assert f"{where(bare)}: no fingerprint" in found
    assert {f"mixtral on vLLM {v}: no cell yet" for v in ENGINES} <= set(found)
    # A case the table runs sharded too has a cell to make per size.
    assert {f"mixtral on vLLM {v} at TP 2: no cell yet" for v in tensor_parallel()} <= set(found)
    assert not any(line.startswith("doctor's verdicts") for line in found)
    # doctor's verdicts on the cells are of doctor's code: judged by other code, they are stale too.
    results["judged_with"] = "0" * 16
    assert any(line.startswith("doctor's verdicts on the cells: judged by other code") for line in stale(results))


def test_a_venv_holding_other_distributions_is_another_venv(monkeypatch):
    """The fingerprint hashes what a venv holds, not only its spec: a venv whose packages moved
    (an unpinned requirement resolved anew, a hand install) makes its cells stale; a venv not
    built here is said, not taken for a changed one."""
    case, engine = CASES["qwen3"], ENGINES["0.11.0"]
    before = fp.fingerprint(case, "v5", engine, "nv-a100")
    real = fp.installed
    monkeypatch.setattr(fp, "installed", lambda venv: "another set" if venv == engine.venv else real(venv))
    fp._file_hash.cache_clear()
    assert fp.fingerprint(case, "v5", engine, "nv-a100") != before
    monkeypatch.setattr(fp, "installed", lambda venv: "not built")
    assert stale(json.loads(RESULTS.read_text()))[0].endswith(
        "not built here (make envs): every cell's fingerprint hashes what its venvs hold"
    )
