"""R7 in the engine's real forward: vLLM 0.5.5 (the BI-100 engine generation, built for the CPU by
`make engine055-env`) whose Mixtral model file calls the vendor module, with no ixformer installed.

What the vendor's code looks like. Upstream 0.5.5's `mixtral.py` never calls ixformer; the BI-100
fork's keeps upstream's classes (MixtralMoE with FusedMoE experts, MixtralDecoderLayer) and runs
`from ixformer.contrib.vllm.layers import mixtral_decoder_layer_forward`, its decoder layer's forward
delegating to it with 0.5.5's call shape: (layer, positions, hidden_states, kv_cache, attn_metadata,
residual) -> (hidden_states, residual). Where the module is missing, the model class cannot be
imported and every Mixtral dies at start.

Why the copy is shaped this way. The test copies the engine's `vllm` package to a temporary
directory and makes exactly those two edits in the copy's `model_executor/models/mixtral.py`
(each anchored on upstream's text; a missing anchor fails the test, it never edits the wrong
place): the import at module level, and the decoder layer's forward body replaced by the vendor
call. Nothing else changes, so the experts stay upstream's FusedMoE, whose CPU forward raises
NotImplementedError: on this CPU the copy can serve a Mixtral only when the shim computes every MoE
from FusedMoE's weights (`w13_weight`, `w2_weight`, `top_k`, `renormalize`), never through the
engine's own MoE. The copy goes on PYTHONPATH (one way an image puts a vLLM outside the
interpreter's site-packages on the path), so the engine's `vllm` console script, its workers and the
launcher's Python all import it, and R7 reads the copy's mixtral.py through
`common.engine.patching.package_dir("vllm")` exactly as it reads the card's.

What is shown, with three vLLM starts (15-40 s each on two cores):
1. vanilla `vllm serve` of the copy dies with `No module named 'ixformer'`, the traceback running
   through the copy's mixtral.py;
2. the unmodified engine serves the same weights as QuantMixtralForCausalLM (mixtral_quant.py,
   plain-torch experts, upstream's own forward): the reference greedy tokens, equal to
   transformers' generate;
3. the launcher (COMPAT_CARD=iluvatar-bi100) on the copy: R7 alone repairs, the shim goes first on
   PYTHONPATH ahead of the copy, and the served greedy tokens and their logprobs equal the
   reference's.
The model has its head_dim written out (transformers 4.55 writes null, which H2 repairs, shown in
test_e2e_vllm055.py), so R7 is its only mismatch with the card.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import List, Tuple

import pytest

from common.rules.r7_vendor_module_shim import SHIM_DIR
from common.triage import triage_file
from harness.engine import ENGINE_055, Server, free_port
from harness.fixtures.factory import SCRIPT, author_record

ENGINE = ENGINE_055
CARD = "iluvatar-bi100"
VENDOR_MODULE = "ixformer.contrib.vllm.layers"
MIXTRAL_FILE = ("model_executor", "models", "mixtral.py")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE.available(), reason=ENGINE.missing_reason),
]

# Float32 on every side, as transformers' reference generate; 0.5.5 reports token ids with the flag.
GREEDY = ["--dtype", "float32", "--return-tokens-as-token-ids"]
# vLLM 0.5.5's frontend exits 0 when its engine died during start-up; only the log tells.
FAILED_START_EXIT = 0

# The vendor-style edits, each (anchor in upstream 0.5.5's mixtral.py, replacement).
VENDOR_IMPORT = f"from {VENDOR_MODULE} import mixtral_decoder_layer_forward\n"
IMPORT_ANCHOR = "from .utils import is_pp_missing_parameter, make_layers\n"
FORWARD_BODY = """\
        # Self Attention
        if residual is None:
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:
            hidden_states, residual = self.input_layernorm(
                hidden_states, residual)
        hidden_states = self.self_attn(
            positions=positions,
            hidden_states=hidden_states,
            kv_cache=kv_cache,
            attn_metadata=attn_metadata,
        )

        # Fully Connected
        hidden_states, residual = self.post_attention_layernorm(
            hidden_states, residual)
        hidden_states = self.block_sparse_moe(hidden_states)
        return hidden_states, residual
"""
VENDOR_CALL = """\
        return mixtral_decoder_layer_forward(self, positions, hidden_states,
                                             kv_cache, attn_metadata, residual)
"""


def engine_vllm_dir() -> Path:
    """The engine's installed `vllm` package, found without importing it."""
    out = subprocess.run(
        [str(ENGINE.python), "-c", "import importlib.util as u; print(u.find_spec('vllm').submodule_search_locations[0])"],
        check=True,
        capture_output=True,
        text=True,
        env=ENGINE.env(),
    )
    return Path(out.stdout.strip())


def vendor_style(source: str) -> str:
    """Upstream 0.5.5's mixtral.py with the vendor fork's two changes (see the module docstring)."""
    assert source.count(IMPORT_ANCHOR) == 1, "upstream import anchor not found"
    layer = source.index("class MixtralDecoderLayer(")
    assert source.count(FORWARD_BODY) == 1 and source.index(FORWARD_BODY) > layer, "MixtralDecoderLayer.forward body not found"
    return source.replace(IMPORT_ANCHOR, IMPORT_ANCHOR + VENDOR_IMPORT).replace(FORWARD_BODY, VENDOR_CALL)


@pytest.fixture(scope="module")
def engine_copy(tmp_path_factory) -> Path:
    """A directory holding a copy of the engine's `vllm` with the vendor-style mixtral.py; it goes
    first on PYTHONPATH. The engine's own files are never touched."""
    root = tmp_path_factory.mktemp("engine-copy")
    shutil.copytree(engine_vllm_dir(), root / "vllm")
    model_file = root.joinpath("vllm", *MIXTRAL_FILE)
    model_file.write_text(vendor_style(model_file.read_text()))
    return root


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory) -> Path:
    """A tiny MixtralForCausalLM saved by the card's transformers 4.55.4 (the engine venv's Python
    runs the builder), with transformers' greedy tokens; head_dim written out (see the docstring)."""
    model = tmp_path_factory.mktemp("r7") / "mixtral"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
    subprocess.run(
        [
            str(ENGINE.python),
            str(SCRIPT),
            str(model),
            "generic",
            "--model-type",
            "mixtral",
            "--initializer-range",
            "0.1",
            "--reference-tokens",
            "16",
        ],
        check=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    config = json.loads((model / "config.json").read_text())
    assert config["architectures"] == ["MixtralForCausalLM"] and config["head_dim"] is None
    config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    (model / "config.json").write_text(json.dumps(config, indent=2))
    return model


def greedy(srv: Server, name: str, prompt: List[int], count: int) -> Tuple[List[int], List[float]]:
    """Greedy tokens (temperature 0, ignore_eos) and each chosen token's logprob."""
    status, body = srv.post(
        "/v1/completions", {"model": name, "prompt": prompt, "max_tokens": count, "temperature": 0, "ignore_eos": True, "logprobs": 1}
    )
    assert status == 200, body
    logprobs = body["choices"][0]["logprobs"]
    return [int(t.split(":", 1)[1]) for t in logprobs["tokens"]], [float(x) for x in logprobs["token_logprobs"]]


@pytest.fixture(scope="module")
def reference(mixtral, tmp_path_factory):
    """The unmodified engine on the same weights, as QuantMixtralForCausalLM: a directory of links
    with only config.json's architectures rewritten. Returns (tokens, logprobs)."""
    view = tmp_path_factory.mktemp("quant") / "mixtral-quant"
    view.mkdir()
    for entry in mixtral.iterdir():
        if entry.name != "config.json":
            (view / entry.name).symlink_to(entry)
    config = json.loads((mixtral / "config.json").read_text())
    config["architectures"] = ["QuantMixtralForCausalLM"]
    (view / "config.json").write_text(json.dumps(config))
    author = author_record(mixtral)
    port = free_port()
    srv = Server(ENGINE.serve_argv_vanilla(view, port) + GREEDY, ENGINE.env(), view.parent / "reference.log", port)
    try:
        assert srv.wait_ready(), srv.log()[-3000:]
        return greedy(srv, str(view), author["reference_prompt"], len(author["reference_tokens"]))
    finally:
        srv.stop()


def test_vanilla_engine_copy_dies_without_ixformer(engine_copy, mixtral, server):
    srv = server(ENGINE.serve_argv_vanilla(mixtral, free_port()), ENGINE.env({"PYTHONPATH": str(engine_copy)}), "vanilla")
    assert srv.wait_ready() is False
    assert srv.wait_exit() == FAILED_START_EXIT
    log = srv.log()
    assert "ModuleNotFoundError: No module named 'ixformer'" in log
    # The traceback runs through the copy's model file, at the vendor import.
    copy_file = str(engine_copy.joinpath("vllm", *MIXTRAL_FILE))
    assert re.search(rf'File "{re.escape(copy_file)}", line \d+, in <module>\n[^\n]*{re.escape(VENDOR_IMPORT)}', log), log[-3000:]
    code = triage_file(str(srv.log_path)).code
    if code == "unknown":
        pytest.xfail(
            "R7's log_signatures match only `No module named 'ixformer.contrib.vllm.layers'`; with no "
            "ixformer at all the log says `No module named 'ixformer'` (and `'ixformer.contrib'` or "
            "`'ixformer.contrib.vllm'` when only part of the package is missing)"
        )
    assert code == "R7"


def test_unmodified_engine_serves_transformers_tokens(mixtral, reference):
    assert reference[0] == author_record(mixtral)["reference_tokens"]


def test_launcher_r7_shim_serves_the_reference_tokens(engine_copy, mixtral, reference, tmp_path, launched):
    # The engine's own MoE cannot run on this CPU: every MoE output below comes from the shim.
    fused_moe = (engine_copy / "vllm" / "model_executor" / "layers" / "fused_moe" / "layer.py").read_text()
    assert re.search(r"def forward_cpu\(self, \*args, \*\*kwargs\):\s+raise NotImplementedError", fused_moe)

    srv, report = launched(ENGINE, CARD, mixtral, tmp_path / "work", *GREEDY, env={"PYTHONPATH": str(engine_copy)})

    [repair] = report["repairs"]
    assert repair["code"] == "R7" and repair["verified"] is True, report
    assert "vllm/model_executor/models/mixtral.py" in repair["detail"]
    assert report["args"] == [], report
    # The shim first, the copy (the image's own path entry) kept behind it.
    assert report["env"] == {"PYTHONPATH": f"{SHIM_DIR}{os.pathsep}{engine_copy}"}, report
    log = srv.log()
    assert "[compat] R7 " in log
    assert f"[compat] exec vllm serve {mixtral} --max-model-len 256 --port {srv.port}" in log

    # Under that PYTHONPATH the engine's Python finds the shim's module and the copy's vllm.
    where = subprocess.run(
        [
            str(ENGINE.python),
            "-c",
            "import importlib.util as u; "
            f"print(u.find_spec('{VENDOR_MODULE}').origin); "
            "print(u.find_spec('vllm').submodule_search_locations[0])",
        ],
        check=True,
        capture_output=True,
        text=True,
        env=ENGINE.env(report["env"]),
    ).stdout.split()
    assert where == [os.path.join(SHIM_DIR, "ixformer", "contrib", "vllm", "layers.py"), str(engine_copy / "vllm")]

    author = author_record(mixtral)
    tokens, logprobs = greedy(srv, str(mixtral), author["reference_prompt"], len(author["reference_tokens"]))
    assert tokens == reference[0]
    assert logprobs == pytest.approx(reference[1], abs=1e-4)  # float32: they differ by ~1e-6
