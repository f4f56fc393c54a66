"""Rules that can only concern some files or model types cost a model outside their scope
nothing: not their check, not even their import (issue 24: more rules, same start-up price)."""

import json
import subprocess
import sys

from common.model.processor_files import PROCESSOR_CONFIG
from common.engine.conformance_cells import table
from common.rules.c1_conformance import acts_on
from common.rules import (
    C1_ARCHITECTURES,
    R6_FILES,
    R7_ARCHITECTURES,
    R8_MODEL_TYPES,
    R9_MODEL_TYPES,
    R10_ARCHITECTURES,
    R11_MODEL_TYPES,
    REGISTRY,
    Scoped,
)
from common.rules.r11_cpu_moe import MODEL_TYPES as CPU_MOE_TYPES
from common.rules.r7_vendor_module_shim import SHIMMED_MODULES
from common.vllm_plugin.compat_backports import BACKPORTS
from common.vllm_plugin.compat_fused_experts import MODEL_TYPES as FUSED_TYPES
from common.vllm_plugin.compat_weight_names import MODEL_TYPES as FLAT_TOWER_TYPES

from common.tests.helpers import ROOT, model_dir

# What only a repair, a scoped rule or verification needs: a clean model's start imports none of it.
NOT_ON_THE_CLEAN_PATH = (
    "common.rules.r6_processor_files",
    "common.rules.r7_vendor_module_shim",
    "common.rules.r8_fused_experts",
    "common.rules.r9_vision_tower_names",
    "common.rules.r10_backport",
    "common.rules.r11_cpu_moe",
    "common.rules.c1_conformance",
    "common.engine.conformance_cells",
    "common.model.config_traits",
    "common.rules.support.plugin",
    "common.model.safetensors_header",
    "common.engine.patching",
    "common.start.model_view",
    "common.start.overlay",
    "common.start.verify",
    "common.codes",
    "common.vllm_plugin",
)


def test_each_scope_holds_what_its_rules_tables_can_act_on():
    assert set(R6_FILES) == {PROCESSOR_CONFIG}
    assert set(R7_ARCHITECTURES) == {a for users, _ in SHIMMED_MODULES.values() for a in users}
    assert set(R8_MODEL_TYPES) == set(FUSED_TYPES)
    assert set(R9_MODEL_TYPES) == set(FLAT_TOWER_TYPES)
    assert set(R10_ARCHITECTURES) == set(BACKPORTS)
    assert set(R11_MODEL_TYPES) == set(CPU_MOE_TYPES)
    # C1's scope on each card: the architectures of the cells it speaks for there.
    speaks = {card: sorted({c["architecture"] for c in data["cells"] if acts_on(c)}) for card, data in table()["cards"].items()}
    assert {card: sorted(archs) for card, archs in C1_ARCHITECTURES.items()} == {card: a for card, a in speaks.items() if a}
    scoped = {entry.code: entry for entry in REGISTRY if isinstance(entry, Scoped)}
    assert sorted(scoped) == ["C1", "R10", "R11", "R6", "R7", "R8", "R9"]
    for entry in scoped.values():
        # A check with no log of its own (C1: a wrong answer logs nothing) has no signature.
        assert entry.rule.code == entry.code and entry.title == entry.rule.title and (entry.log_signatures or entry.kind == "runtime check")


def test_a_clean_start_imports_no_scoped_rule(tmp_path, models):
    """The launch path on a clean model (a clean Llama with safetensors weights named as
    transformers 4 saves them): none of the modules only repairs and scoped rules need."""
    model = models("457-generic")
    code = (
        "import json, os, sys; from common.start.preflight import build_plan; "
        f"plan = build_plan({str(model)!r}, 'nv-a100', [], dict(os.environ, COMPAT_WORK_DIR={str(tmp_path / 'w')!r})); "
        "print(json.dumps({'args': plan.args, 'loaded': sorted(m for m in sys.modules if m.startswith('common'))}))"
    )
    out = json.loads(subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), capture_output=True, text=True, check=True).stdout)
    assert out["args"] == []
    assert [m for m in out["loaded"] if m.startswith(NOT_ON_THE_CLEAN_PATH)] == []


def test_a_model_in_scope_gets_the_rule(tmp_path, env_for_tests):
    """A fused Mixtral loads R8 and is repaired as before (the scope only decides the import)."""
    from common.start.preflight import build_plan

    header = json.dumps({"model.layers.0.mlp.experts.gate_up_proj": {"dtype": "BF16", "shape": [4, 512, 256], "data_offsets": [0, 0]}})
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 256, "num_attention_heads": 4}
    config.update(num_local_experts=4, intermediate_size=256, head_dim=64)
    model = model_dir(tmp_path / "m", {"config.json": config, "model.safetensors": len(header).to_bytes(8, "little") + header.encode()})
    plan = build_plan(str(model), "nv-a100", [], env_for_tests)
    assert "R8" in [r.code for r in plan.repairs]


def test_c1s_scope_is_written_from_the_cells_and_nothing_else_of_the_file_moves(tmp_path, monkeypatch):
    """`python -m conformance judge` and `run` write C1_ARCHITECTURES (conformance/report.py's
    write_scope); the committed file is already the cells' scope, so writing it changes nothing."""
    import ast
    import json

    from conformance import report

    scopes = tmp_path / "scopes.py"
    committed = (ROOT / "common" / "rules" / "support" / "scopes.py").read_text()
    scopes.write_text(committed)
    results = json.loads((ROOT / "conformance" / "results.json").read_text())
    assert report.write_scope(results, scopes) is False and scopes.read_text() == committed

    wanted = {"iluvatar-bi100": ["AnotherForCausalLM", "LlamaForCausalLM"], "nv-a100": ["MptForCausalLM"]}
    monkeypatch.setattr(report, "c1_scope", lambda results: wanted)
    assert report.write_scope(results, scopes) is True
    written = scopes.read_text()
    [node] = [n for n in ast.parse(written).body if isinstance(n, ast.AnnAssign) and n.target.id == "C1_ARCHITECTURES"]
    assert {card: list(archs) for card, archs in ast.literal_eval(node.value).items()} == wanted
    before, after = committed.split("C1_ARCHITECTURES:")[0], written.split("C1_ARCHITECTURES:")[0]
    assert before == after and written.endswith(committed[committed.index("\n}\n", committed.index("C1_ARCHITECTURES:")) + 3 :])
    assert report.write_scope(results, scopes) is False
