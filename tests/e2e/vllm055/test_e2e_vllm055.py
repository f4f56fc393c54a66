"""End to end on real vLLM 0.5.5 (the Iluvatar BI-100 engine generation, built for the CPU by
`make engine055-env`, transformers 4.55.4 as on the card).

Vanilla 0.5.5 is shown failing on what the platform sees: a transformers-5 tokenizer, a model
without chat template, an architecture its registry lacks (a renamed class; Qwen3, which
transformers 4.55 has and vLLM 0.5.5 does not), a transformers-5 config that serves silently
wrong tokens, and a Mixtral config with `"head_dim": null` (what transformers 4.55 writes).
Then the image's launcher, run by the engine's own Python with COMPAT_CARD=iluvatar-bi100, serves
those models right (Qwen3 through its backport: tests/e2e/vllm055/test_e2e_backports_vllm055.py): greedy tokens are compared with transformers' own `generate` on the same
weights (float32 on both sides).

Each vLLM start costs 15-30 s on two cores: one server per model, every assertion on it.
"""

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from common.triage import triage_file
from harness.engine import ENGINE_055, Server, free_port, ipc_dir
from harness.fixtures.factory import SCRIPT, author_record, build

ENGINE = ENGINE_055
CARD = "iluvatar-bi100"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not ENGINE.available(), reason=ENGINE.missing_reason),
]

# Greedy proofs run in float32, as the reference `generate` does. vLLM 0.5.5 reports token ids
# only with the server flag (0.11.0 takes `return_tokens_as_token_ids` in the request).
GREEDY = ["--dtype", "float32", "--return-tokens-as-token-ids"]
# vLLM 0.5.5's frontend returns normally when its engine process died during start-up: the
# process exits 0 with the traceback in its log. Only the log tells a failed start here.
FAILED_START_EXIT = 0


def build_455(style: str, dest: Path, *extra: str) -> Path:
    """A fixture saved by transformers 4.55.4, the card's own (the engine venv's Python runs the
    builder): `torch_dtype` in config.json, and `"head_dim": null` where the config class has it."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")
    subprocess.run(
        [str(ENGINE.python), str(SCRIPT), str(dest), style, *extra], check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    return dest


# name -> how it is made. Built on first use, once per module.
RECIPES = {
    # transformers 5: TokenizersBackend + list extra_special_tokens, rope_theta 1e6 only inside
    # rope_parameters, `dtype` only; with a greedy reference from transformers 5's generate.
    "v5": lambda d: build("v5", "generic", d, "--initializer-range", "0.1", "--reference-tokens", "16"),
    # transformers 4.57 under a class name neither vLLM nor transformers knows.
    "renamed": lambda d: build("457", "generic", d, "--architecture", "TinyChatForCausalLM"),
    # transformers 4.55.4: Qwen3 (its registry has no Qwen3), a Mixtral under the CPU-runnable
    # QuantMixtral class, and a clean Llama.
    "qwen3": lambda d: build_455("generic", d, "--model-type", "qwen3"),
    "mixtral": lambda d: build_455(
        "generic",
        d,
        "--model-type",
        "mixtral",
        "--architecture",
        "QuantMixtralForCausalLM",
        "--initializer-range",
        "0.1",
        "--reference-tokens",
        "16",
    ),
    "clean": lambda d: build_455("generic", d),
    # A Llama saved by 4.55.4 and exported under a class name no one knows, with the greedy tokens
    # of the same weights under the canonical class (transformers loads it by model_type).
    "renamed-ref": lambda d: build_455(
        "generic", d, "--architecture", "TinyChatForCausalLM", "--initializer-range", "0.1", "--reference-tokens", "16"
    ),
}


@pytest.fixture(scope="module")
def bi100_models(tmp_path_factory, served_models):
    base = tmp_path_factory.mktemp("bi100")
    cache: Dict[str, Path] = {}

    def get(name: str) -> Path:
        if name == "notemplate":
            return served_models("457-generic-notemplate")  # shared with the 0.11.0 suite
        if name not in cache:
            cache[name] = RECIPES[name](base / name)
        return cache[name]

    return get


def vanilla(server, model: Path, *extra: str) -> Server:
    return server(ENGINE.serve_argv_vanilla(model, free_port()) + list(extra), ENGINE.env(), "vanilla")


def served_name(report: dict, model: Path) -> str:
    """The model name requests use: the original path, also when a model view is served in its place."""
    args = report.get("args", [])
    return args[args.index("--served-model-name") + 1] if "--served-model-name" in args else str(model)


def config_of(model: Path) -> dict:
    return json.loads((model / "config.json").read_text())


# ---- vanilla vLLM 0.5.5 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, line, code",
    [
        ("v5", "ValueError: Tokenizer class TokenizersBackend does not exist or is not currently imported.", "R3b"),
        ("renamed", "ValueError: Model architectures ['TinyChatForCausalLM'] are not supported for now.", "R4"),
        # The image serves it through its backport (tests/e2e/vllm055/test_e2e_backports_vllm055.py): R10.
        ("qwen3", "ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now.", "R10"),
        # transformers 4.55.4 writes "head_dim": null for Mixtral; 0.5.5's get_head_size returns it and
        # the KV-cache sizing multiplies by it.
        ("mixtral", "TypeError: unsupported operand type(s) for *: 'int' and 'NoneType'", "H2"),
    ],
)
def test_vanilla_refuses_to_start(bi100_models, server, name, line, code):
    model = bi100_models(name)
    if name == "mixtral":
        assert "head_dim" in config_of(model) and config_of(model)["head_dim"] is None
    srv = vanilla(server, model)
    assert srv.wait_ready() is False
    assert srv.wait_exit() == FAILED_START_EXIT
    assert line in srv.log()
    assert triage_file(str(srv.log_path)).code == code


def test_vanilla_without_chat_template_chat_400_completions_200(bi100_models, server):
    model = bi100_models("notemplate")  # saved by transformers 4.57: `dtype`, no `torch_dtype`
    srv = vanilla(server, model)
    assert srv.wait_ready(), srv.log()[-3000:]
    # The test harness forks the process the server keeps its engine in (harness/engine_host.py),
    # where vLLM spawns it: a spawned one runs multiprocessing's spawn_main and imports it all again.
    started = re.search(r"Started engine process with PID (\d+)", srv.log())
    assert started, srv.log()[-3000:]
    assert "spawn_main" not in Path(f"/proc/{started.group(1)}/cmdline").read_text(), "the engine process was spawned"
    # Its ZeroMQ socket is in the test process's own directory (harness/engine.py `ipc_dir`), not /tmp.
    rpc = re.search(r"Multiprocessing frontend to use ipc://(\S+) for RPC Path", srv.log())
    assert rpc and Path(rpc.group(1)).parent == Path(ipc_dir()), srv.log()[-3000:]
    status, body = srv.chat(str(model))
    assert status == 400
    assert "default chat template is no longer allowed" in body["message"]
    status, body = srv.complete(str(model))
    assert status == 200 and body["usage"]["completion_tokens"] == 4, body
    # transformers 4.55 reads only `torch_dtype`: the model's bfloat16 is lost, vLLM takes it for
    # float32 and picks float16 (bfloat16 on the CPU, which has no float16; a GPU serves float16).
    log = srv.log()
    assert "Downcasting torch.float32 to torch.float16." in log
    assert "float16 is not supported on CPU, casting to bfloat16." in log


def test_vanilla_transformers5_config_serves_wrong_tokens(bi100_models, server):
    """rope_theta 1e6 sits only inside rope_parameters: transformers 4.55 uses 10000, no error."""
    model = bi100_models("v5")
    author = author_record(model)
    n = len(author["reference_tokens"])
    # A tokenizer 4.55 can load (the same vocabulary), so only the config differs.
    srv = vanilla(server, model, "--tokenizer", str(bi100_models("clean")), *GREEDY)
    assert srv.wait_ready(), srv.log()[-3000:]
    got = srv.greedy_tokens(str(model), author["reference_prompt"], n, ids_in_request=False)
    assert got != author["reference_tokens"]
    assert "torch.float32" in srv.log() and "rope_theta=None" in srv.log()
    assert triage_file(str(srv.log_path)).code == "unknown"  # wrong tokens, and nothing in the log says so


def test_vanilla_mixtral_with_explicit_head_dim_serves_transformers_tokens(bi100_models, server, tmp_path):
    """The same weights, with head_dim written out (a directory of links, config.json rewritten),
    serve on the CPU as QuantMixtral and give transformers 4.55.4's greedy tokens."""
    model = bi100_models("mixtral")
    author = author_record(model)
    view = tmp_path / "mixtral-head-dim"
    view.mkdir()
    for entry in model.iterdir():
        if entry.name != "config.json":
            (view / entry.name).symlink_to(entry)
    config = config_of(model)
    config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
    (view / "config.json").write_text(json.dumps(config))
    srv = vanilla(server, view, *GREEDY)
    assert srv.wait_ready(), srv.log()[-3000:]
    assert (
        srv.greedy_tokens(str(view), author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
        == author["reference_tokens"]
    )
    status, body = srv.chat(str(view))
    assert status == 200, body


# ---- through the launcher (COMPAT_CARD=iluvatar-bi100) ----------------------------------------


def test_launcher_serves_transformers5_model_with_authors_ids_and_tokens(bi100_models, tmp_path, launched):
    """The tokenizer (R3, R3b) and the config (R5) of a transformers-5 model, on one server: chat
    and completions 200, the author's token ids, and transformers 5's greedy tokens."""
    model = bi100_models("v5")
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY)
    codes = [r["code"] for r in report["repairs"]]
    assert {"R3", "R3b", "R5"} <= set(codes) and all(r["verified"] for r in report["repairs"]), report
    name = served_name(report, model)
    status, body = srv.chat(name)
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    status, body = srv.complete(name)
    assert status == 200 and body["usage"]["completion_tokens"] == 4, body
    for token, want in author["special_ids"].items():
        assert srv.token_ids(name, token) == [want], token
    assert srv.token_ids(name, author["probe"]) == author["probe_ids"]
    assert (
        srv.greedy_tokens(name, author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
        == author["reference_tokens"]
    )


def test_launcher_chat_without_template_200(bi100_models, tmp_path, launched):
    model = bi100_models("notemplate")
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work")
    assert "R2" in [r["code"] for r in report["repairs"]]
    status, body = srv.chat(served_name(report, model))
    assert status == 200, body
    assert body["choices"][0]["message"]["role"] == "assistant"
    # R5 restored the `dtype`-only config's bfloat16: the engine process serves it in bfloat16
    # (it still takes the config for float32, but casts to the dtype given, not to float16).
    [r5] = [r for r in report["repairs"] if r["code"] == "R5"]
    assert r5["args"] == ["--dtype", "bfloat16"]
    assert "dtype=torch.bfloat16" in srv.log() and "Downcasting torch.float32 to torch.bfloat16." in srv.log()


def test_launcher_serves_a_renamed_class_through_a_model_view(bi100_models, tmp_path, launched):
    """vLLM 0.5.5 has no --hf-overrides: R4 serves a model view whose config.json names the
    canonical class; the greedy tokens equal those of the same weights under that class."""
    model = bi100_models("renamed-ref")
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY)
    [r4] = report["repairs"]
    assert r4["code"] == "R4" and r4["verified"] is True and r4["config_edits"] == {"architectures": ["LlamaForCausalLM"]}
    view = Path(report["view"]["path"])
    assert report["model_path"] == str(view) and report["args"] == ["--served-model-name", str(model)]
    assert f"[compat] exec vllm serve {view} --served-model-name {model} " in srv.log()
    assert config_of(model)["architectures"] == ["TinyChatForCausalLM"]  # the model itself untouched
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
    assert got == author["reference_tokens"]
    status, body = srv.chat(str(model))
    assert status == 200, body


def test_launcher_writes_the_null_head_dim_through_a_model_view(bi100_models, tmp_path, launched):
    """H2: transformers 4.55.4 saved `"head_dim": null`; the view's config.json holds 64 and the
    Mixtral serves with transformers' own greedy tokens."""
    model = bi100_models("mixtral")
    author = author_record(model)
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", *GREEDY)
    # R11 with H2: this engine is a CPU build, its FusedMoE has no CPU path of its own.
    assert [r["code"] for r in report["repairs"]] == ["H2", "R11"], report
    assert all(r["verified"] for r in report["repairs"]), report
    assert json.loads((Path(report["model_path"]) / "config.json").read_text())["head_dim"] == 64
    got = srv.greedy_tokens(str(model), author["reference_prompt"], len(author["reference_tokens"]), ids_in_request=False)
    assert got == author["reference_tokens"]


def test_launcher_clean_model_gets_zero_args_and_serves(bi100_models, tmp_path, launched):
    model = bi100_models("clean")  # saved by the card's own transformers 4.55.4
    # The launcher's real exec of `vllm` (the other starts run it in a fork of the engine host).
    srv, report = launched(ENGINE, CARD, model, tmp_path / "work", exec_=True)
    assert report["args"] == [] and report["env"] == {} and report["repairs"] == [], report
    assert f"[compat] exec vllm serve {model} --max-model-len 256 --port {srv.port} --host 127.0.0.1" in srv.log()
    status, body = srv.chat(str(model))
    assert status == 200, body
    status, body = srv.complete(str(model))
    assert status == 200 and body["usage"]["completion_tokens"] == 4, body
