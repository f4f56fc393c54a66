"""R7: the shim goes on PYTHONPATH only when the engine imports the vendor module and it is absent."""

import os
import subprocess
import sys

import pytest

from common.tests.helpers import ROOT, model_dir, preflight_json


@pytest.fixture(autouse=True)
def only_rules_under_test(env_for_tests):
    """The other rules have their own tests; here they would only add unrelated repairs."""
    env_for_tests["COMPAT_SKIP"] = "R2,R4,R5,H1,H2,R11"


SHIMS = str(ROOT / "common" / "shims")
MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}


def site(tmp_path, layers: bool, ixformer: bool = True):
    """A vendor-like site-packages: vLLM's mixtral.py importing the module; ixformer with or without it."""
    root = tmp_path / "site"
    models = root / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (models / "mixtral.py").write_text("from ixformer.contrib.vllm.layers import mixtral_decoder_layer_forward\n")
    if ixformer:
        pkg = root / "ixformer"
        (pkg / "contrib" / "vllm").mkdir(parents=True)
        (pkg / "__init__.py").write_text("VENDOR = 'real ixformer'\n")
        (pkg / "ops.py").write_text("def gelu():\n    return 'vendor op'\n")
        (pkg / "contrib" / "__init__.py").write_text("")
        (pkg / "contrib" / "vllm" / "__init__.py").write_text("")
        if layers:
            (pkg / "contrib" / "vllm" / "layers.py").write_text("def mixtral_decoder_layer_forward(*a):\n    return 'vendor'\n")
    return root


def plan_for(tmp_path, env_for_tests, site_root, config=MIXTRAL):
    env = dict(env_for_tests, PYTHONPATH=f"{ROOT}{os.pathsep}{site_root}")
    model = model_dir(tmp_path / "model", {"config.json": config})
    return preflight_json(model, card="iluvatar-bi100", env=env), env


def test_absent_module_gets_the_shim_and_the_real_package_keeps_working(tmp_path, env_for_tests):
    root = site(tmp_path, layers=False)
    plan, env = plan_for(tmp_path, env_for_tests, root)
    assert [r["code"] for r in plan["repairs"]] == ["R7"]
    path = plan["env"]["PYTHONPATH"].split(os.pathsep)
    assert path[0] == SHIMS and path[1:] == env["PYTHONPATH"].split(os.pathsep)
    code = (
        "import ixformer, ixformer.ops; from ixformer.contrib.vllm.layers import mixtral_decoder_layer_forward as f; "
        "print(ixformer.VENDOR, ixformer.ops.gelu(), f.__module__, 'shim' in f.__globals__['SHIM'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=dict(env, PYTHONPATH=plan["env"]["PYTHONPATH"]), capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["real", "ixformer", "vendor", "op", "ixformer.contrib.vllm.layers", "True"]


def test_present_module_is_left_alone(tmp_path, env_for_tests):
    plan, _ = plan_for(tmp_path, env_for_tests, site(tmp_path, layers=True))
    assert plan["repairs"] == [] and plan["env"] == {}


def test_no_ixformer_at_all_still_gets_a_working_shim(tmp_path, env_for_tests):
    plan, env = plan_for(tmp_path, env_for_tests, site(tmp_path, layers=False, ixformer=False))
    assert [r["code"] for r in plan["repairs"]] == ["R7"]
    subprocess.run(
        [sys.executable, "-c", "from ixformer.contrib.vllm.layers import mixtral_decoder_layer_forward"],
        env=dict(env, PYTHONPATH=plan["env"]["PYTHONPATH"]),
        check=True,
    )


@pytest.mark.parametrize(
    "config",
    [
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
        {"architectures": "MixtralForCausalLM"},  # wrong type: no crash, no repair
    ],
)
def test_other_models_get_nothing(tmp_path, env_for_tests, config):
    plan, _ = plan_for(tmp_path, env_for_tests, site(tmp_path, layers=False), config)
    assert plan["repairs"] == [] and plan["env"] == {}


def test_engine_without_the_vendor_import_gets_nothing(tmp_path, env_for_tests):
    root = site(tmp_path, layers=False)
    (root / "vllm" / "model_executor" / "models" / "mixtral.py").write_text("import torch\n")
    plan, _ = plan_for(tmp_path, env_for_tests, root)
    assert plan["repairs"] == []
