"""R11: a CPU build of an engine whose fused MoE layer has no CPU path gets one from the image's
plugin, for the model types built on that layer; the card's own engine never does."""

from functools import partial

import pytest

from common.engine.profile import load_profile
from common.vllm_plugin.compat_patches import cpu_moe as compat_cpu_moe

from common.tests.helpers import ROOT, TINY_MIXTRAL, model_dir, of_rule, only_rule, preflight_json

MIXTRAL = dict(TINY_MIXTRAL, head_dim=64, torch_dtype="bfloat16")


only_r11 = only_rule("R2,R3,R3b,R4,R5,H1,H2,R7,C1,CTX", "only_r11")


r11 = partial(of_rule, code="R11")  # (repairs, findings) of R11 in a plan


def test_the_bi100_cpu_build_gets_grouped_experts_and_the_others_nothing(tmp_path, env_for_tests):
    assert load_profile("iluvatar-bi100").cpu_build is True and load_profile("iluvatar-bi100").fused_moe_cpu is False
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": MIXTRAL}), "iluvatar-bi100", env=env_for_tests)
    [repair], [] = r11(plan)
    assert repair["env"][compat_cpu_moe.ENV] == "grouped" and repair["verified"] is True
    assert plan["env"][compat_cpu_moe.ENV] == "grouped" and plan["env"]["PYTHONPATH"].endswith("vllm_plugin")
    # vLLM 0.11's fused MoE has its CPU path: nothing to give it.
    assert r11(preflight_json(model_dir(tmp_path / "a", {"config.json": MIXTRAL}), "nv-a100", env=env_for_tests)) == ([], [])
    # A dense model is outside the rule's scope.
    dense = dict(MIXTRAL, architectures=["LlamaForCausalLM"], model_type="llama")
    assert r11(preflight_json(model_dir(tmp_path / "d", {"config.json": dense}), "iluvatar-bi100", env=env_for_tests)) == ([], [])


def test_a_card_engine_that_is_no_cpu_build_gets_nothing(tmp_path, env_for_tests, monkeypatch):
    """The image bakes its own engine's profile: the vendor's vLLM is no CPU build."""
    from common.model.modeldir import ModelDir
    from common.rules.support.base import Context
    from common.rules.r11_cpu_moe import RULE
    from common.engine.vllm_args import UserArgs

    profile = load_profile("iluvatar-bi100")
    monkeypatch.setattr(profile, "cpu_build", False)
    model = model_dir(tmp_path / "m", {"config.json": MIXTRAL})
    outcome = RULE.check(Context(ModelDir(str(model)), profile, {}, UserArgs([]), env_for_tests))
    assert outcome.repairs == [] and outcome.findings == []


class Layer:
    def __init__(self, w13, w2):
        self.w13_weight, self.w2_weight = w13, w2


def test_the_cpu_path_computes_every_routed_expert_as_a_dense_reference():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tokens, hidden, inter, experts, top_k = 7, 16, 24, 5, 2
    x = torch.randn(tokens, hidden)
    w13, w2 = torch.randn(experts, 2 * inter, hidden) * 0.1, torch.randn(experts, hidden, inter) * 0.1
    logits = torch.randn(tokens, experts)
    got = compat_cpu_moe.forward_cpu(None, Layer(w13, w2), x, False, top_k, logits, True)
    weights, chosen = torch.topk(torch.softmax(logits, dim=-1), top_k)
    weights = weights / weights.sum(-1, keepdim=True)
    want = torch.zeros_like(x)
    for t in range(tokens):
        for slot in range(top_k):
            e = int(chosen[t, slot])
            gate_up = w13[e] @ x[t]
            want[t] += weights[t, slot] * (w2[e] @ (torch.nn.functional.silu(gate_up[:inter]) * gate_up[inter:]))
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_install_gives_the_engines_method_the_path_and_says_when_there_is_none(monkeypatch, caplog):
    import logging
    import sys
    import types

    module_name, class_name = compat_cpu_moe.METHOD
    log = logging.getLogger("test.r11")
    monkeypatch.setitem(sys.modules, module_name, types.ModuleType(module_name))
    assert compat_cpu_moe.install(log) is False and "has no" in caplog.text  # no such class: left as it is

    class UnquantizedFusedMoEMethod:
        def forward_cpu(self, *args, **kwargs):
            raise NotImplementedError("The CPU backend currently does not support MoE.")

    setattr(sys.modules[module_name], class_name, UnquantizedFusedMoEMethod)
    assert compat_cpu_moe.install(log) is True
    assert UnquantizedFusedMoEMethod.forward_cpu is compat_cpu_moe.forward_cpu


@pytest.mark.parametrize("layers", [True, False], ids=["vendor-module", "r7-shim"])
def test_the_vendor_fork_whose_layer_runs_the_experts_gets_nothing(tmp_path, env_for_tests, layers):
    """The BI-100 fork's mixtral.py runs its decoder layer through ixformer (real, or R7's shim):
    FusedMoE is never called there, so R11 has nothing to give it."""
    import os

    from .test_r7_rule import site

    env = dict(env_for_tests, PYTHONPATH=f"{ROOT}{os.pathsep}{site(tmp_path, layers=layers)}")
    plan = preflight_json(model_dir(tmp_path / "m", {"config.json": MIXTRAL}), "iluvatar-bi100", env=env)
    assert r11(plan) == ([], [])
