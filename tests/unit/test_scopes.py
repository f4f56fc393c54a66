"""The generated scopes of common/rules/support/scopes.py (compat_build/scopes.py): R10's is the
backports' table as the generator writes it, and a new backport moves R10's block alone."""

from __future__ import annotations

import ast

from compat_build import scopes
from common.vllm_plugin.compat_backports import BACKPORTS


def test_r10s_scope_is_the_backports_table_as_written():
    assert scopes.is_current("R10_ARCHITECTURES", scopes.r10_architectures())
    assert scopes.main(["--check"]) == 0
    assert set(scopes.r10_architectures()) == set(BACKPORTS)


def test_a_new_backport_rewrites_r10s_block_and_nothing_else(tmp_path, monkeypatch):
    copy = tmp_path / "scopes.py"
    committed = scopes.SCOPES.read_text(encoding="utf-8")
    copy.write_text(committed, encoding="utf-8")
    monkeypatch.setattr(scopes, "SCOPES", copy)
    wanted = scopes.r10_architectures() + ("AardvarkForCausalLM",)
    monkeypatch.setattr(scopes, "r10_architectures", lambda: wanted)

    assert scopes.main(["--check"]) == 1 and copy.read_text(encoding="utf-8") == committed
    assert scopes.main([]) == 0
    written = copy.read_text(encoding="utf-8")
    [node] = [n for n in ast.parse(written).body if isinstance(n, ast.Assign) and n.targets[0].id == "R10_ARCHITECTURES"]
    assert list(ast.literal_eval(node.value)) == sorted(wanted)
    head = committed.split("R10_ARCHITECTURES = (")[0]
    tail = committed[committed.index("\n)\n", committed.index("R10_ARCHITECTURES = (")) :]
    assert written.startswith(head) and written.endswith(tail)
    # Written once, it is current: a second run changes nothing.
    assert scopes.main(["--check"]) == 0 and not scopes.rewrite("R10_ARCHITECTURES", wanted, copy)
