"""One code registry: `explain` has a page for every code, codes match in any case, and triage
and COMPAT_SKIP read the same registry."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import codes
from common.start.preflight import build_plan
from common.rules import REGISTRY
from common.tests.helpers import model_dir, run_common
from common.triage import signatures

ROOT = Path(__file__).resolve().parents[2]


def explain(*args):
    return subprocess.run([sys.executable, "-m", "common", "explain", *args], cwd=str(ROOT), capture_output=True, text=True, timeout=60)


def test_every_code_has_a_page_with_why_and_fix():
    every = codes.all_codes()
    assert len({codes.normalize(c.code) for c in every}) == len(every), "a code is listed twice"
    for entry in every:
        for spelling in (entry.code, entry.code.lower(), entry.code.upper()):
            result = explain(spelling)
            assert result.returncode == 0, result.stderr
            assert result.stdout.startswith(f"{entry.code}: {entry.title}\nkind: {entry.kind}\n")
            assert entry.why.split()[0] in result.stdout and f"fix: {entry.fix}" in result.stdout


def test_explain_lists_the_codes_and_refuses_unknown_ones():
    listing = explain()
    assert listing.returncode == 0
    for entry in codes.all_codes():
        assert f"  {entry.code}" in listing.stdout
    unknown = explain("R99")
    assert unknown.returncode == 2 and "no code 'R99'" in unknown.stderr and "R3b" in unknown.stderr


def test_runtime_rules_are_registry_entries_and_triage_reads_the_registry():
    assert [c.code for c in codes.runtime_codes()] == [r.code for r in REGISTRY]
    from_registry = [(c.code, s) for c in codes.all_codes() for s in c.signatures]
    assert [(s.code, s.regex.pattern.decode()) for s in signatures()] == from_registry
    assert {"L1", "L3", "OOM", "REMOTE_CODE", "R3b"} <= {code for code, _ in from_registry}


@pytest.mark.parametrize("spelling", ["R3b", "r3b", "R3B", " r3B "])
def test_compat_skip_matches_codes_in_any_case(tmp_path, spelling):
    """A transformers-5 tokenizer config: R3b would rewrite its class; skipped in any spelling."""
    model = model_dir(
        tmp_path / "m",
        {
            "config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "head_dim": 64},
            "tokenizer_config.json": {"tokenizer_class": "TokenizersBackend", "chat_template": "{{ messages }}"},
            "tokenizer.json": {"model": {"vocab": {}}},
        },
    )
    env = dict(os.environ, COMPAT_WORK_DIR=str(tmp_path / "work"))
    assert "R3b" in [r.code for r in build_plan(str(model), "nv-a100", [], env, verify=False).repairs]
    plan = build_plan(str(model), "nv-a100", [], dict(env, COMPAT_SKIP=f"R2,{spelling}"), verify=False)
    assert "R3b" not in [r.code for r in plan.repairs]
    assert json.dumps(plan.to_json())


def test_compat_skip_says_when_a_code_is_unknown(tmp_path):
    model = model_dir(tmp_path / "m", {"config.json": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}})
    env = dict(os.environ, COMPAT_WORK_DIR=str(tmp_path / "w"), COMPAT_SKIP="R9z,oom")
    result = run_common(["preflight", str(model), "--card", "nv-a100", "--json"], env, timeout=60)
    assert result.returncode == 0 and json.loads(result.stdout)["card"] == "nv-a100"
    assert "COMPAT_SKIP names OOM, R9Z, which no runtime rule has; ignored" in result.stderr


def test_each_rule_module_carries_one_code_and_is_named_by_it():
    """common/rules/ holds one module per rule code, named by the code (r3b_..., kv_..., ctx_...):
    a reader finds a rule from its code in one guess; what the rules share is in rules/support/."""
    from conformance.fingerprint import rule_modules

    found = {}
    for path, rules in rule_modules().items():
        codes_here = {rule.code for rule in rules}
        assert len(codes_here) == 1, (path.name, codes_here)
        [code] = codes_here
        assert path.stem == code.lower() or path.stem.startswith(code.lower() + "_"), (path.name, code)
        found[code] = path.stem
    assert set(found) == {rule.code for rule in REGISTRY}
