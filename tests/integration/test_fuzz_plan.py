"""Property-based: whatever a model holds and whatever the platform passes, the red lines hold.

Arbitrary JSON values (deep, huge, non-finite, lone surrogates, wrong types, not JSON at all) in
config.json, tokenizer_config.json, generation_config.json, tokenizer.json and
chat_template.jinja, arbitrary user arguments (with a --config YAML file now and then), every
card. Asserted for `build_plan`, for the CLI's `preflight --json` and for `launch`'s exec:
no exception escapes, the plan is printable as strict JSON, the user's arguments arrive
unchanged (bar their own --hf-overrides value, which absorbs ours) and last, no repair flag
repeats one the user gives, every argv element is a str, and the environment gains nothing but
the repairs' variables.

`make test` runs a few hundred examples; `make fuzz` (tests/fuzz.py) runs FUZZ_EXAMPLES per test.
"""

import contextlib
import importlib
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from hypothesis import strategies as st

import common.start.launch as launch_module
from common import cli
from common.engine.profile import load_profile
from common.engine.vllm_args import UserArgs, flag_name
from common.plan import Plan
from common.start.preflight import build_plan

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0")) or None
COUNT = {"examples": 0}
# Each run draws new inputs: the seed is the run's (conftest.py draws it once for all of pytest's
# workers and prints it in the header; FUZZ_SEED=N runs the same inputs again).
SEED = int(os.environ.get("FUZZ_SEED") or 0)
FUZZ = settings(max_examples=EXAMPLES or 120, deadline=None, database=None, suppress_health_check=list(HealthCheck))
CARDS = ["nv-a100", "hygon-k100", "iluvatar-bi100"]
# The variables a repair may set: the engine's own switches H1 uses, PYTHONPATH for the image's
# plugin directory, and each plugin transform's switch (its module's ENV: R8, R9, R10, R11, R12).
PLUGIN_MODULES = ("compat_weight_names", "compat_fused_experts", "compat_patches.cpu_moe", "compat_backports", "compat_configs")
REPAIR_ENV = {"VLLM_ATTENTION_BACKEND", "VLLM_USE_FLASH_ATTN_PA", "PYTHONPATH"} | {
    importlib.import_module(f"common.vllm_plugin.{name}").ENV for name in PLUGIN_MODULES
}

# -- what a model may hold ------------------------------------------------------------------

texts = st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=12)
names = st.sampled_from(
    [
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "MixtralForCausalLM",
        "TokenizersBackend",
        "PreTrainedTokenizerFast",
        "llama",
        "qwen2",
        "mixtral",
        "default",
        "yarn",
        "linear",
        "bfloat16",
        "float16",
        "<|im_start|>",
        "<|im_end|>",
        "<s>",
        "</s>",
        "--tokenizer",
    ]
)
numbers = st.one_of(
    st.integers(-10, 10**7), st.sampled_from([10**400, -(10**30), 128, 4096, 32, 1000000.0]), st.floats(allow_nan=True, allow_infinity=True)
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts, names)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.one_of(texts, names), inner, max_size=4)),
    max_leaves=12,
)

ROPE = st.fixed_dictionaries(
    {},
    optional={
        "rope_type": st.one_of(names, values),
        "rope_theta": st.one_of(numbers, values),
        "factor": st.one_of(numbers, values),
        "partial_rotary_factor": st.one_of(numbers, values),
        "original_max_position_embeddings": numbers,
        "truncate": st.booleans(),
    },
)
CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "architectures": st.one_of(st.lists(st.one_of(names, texts), max_size=2), values),
        "model_type": st.one_of(names, values),
        "rope_parameters": st.one_of(ROPE, values),
        "rope_theta": numbers,
        "rope_scaling": st.one_of(st.none(), values),
        "dtype": st.one_of(names, values),
        "torch_dtype": st.one_of(names, values),
        "head_dim": numbers,
        "hidden_size": numbers,
        "num_attention_heads": numbers,
        "n_embd": numbers,
        "n_head": numbers,
        "qk_nope_head_dim": numbers,
        "qk_rope_head_dim": numbers,
        "num_local_experts": numbers,
        "text_config": st.one_of(st.fixed_dictionaries({}, optional={"rope_parameters": ROPE, "head_dim": numbers}), values),
        "auto_map": values,
        "quantization_config": values,
    },
)
TOKENIZER_CONFIG = st.fixed_dictionaries(
    {},
    optional={
        "tokenizer_class": st.one_of(names, values),
        "extra_special_tokens": st.one_of(st.lists(st.one_of(names, texts, values), max_size=3), values),
        "additional_special_tokens": st.one_of(st.lists(st.one_of(names, texts), max_size=3), values),
        "chat_template": st.one_of(st.none(), texts, values),
        "bos_token": st.one_of(names, texts, values),
        "eos_token": st.one_of(names, texts, values),
        "added_tokens_decoder": values,
        "auto_map": values,
    },
)
TOKENIZER = st.fixed_dictionaries(
    {},
    optional={
        "added_tokens": values,
        "model": st.one_of(
            values, st.fixed_dictionaries({"type": names, "vocab": st.dictionaries(st.one_of(names, texts), numbers, max_size=4)})
        ),
    },
)


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _dump(value) -> bytes:
    return json.dumps(value).encode()  # ASCII: lone surrogates become \\udXXX escapes, NaN stays NaN


def file_content(structured):
    return st.one_of(
        st.none(),
        structured.map(_dump),
        values.map(_dump),
        st.integers(60, 3000).map(_deep),  # past the depth cap, past the recursion limit
        st.integers(1000, 100000).map(lambda n: b"[" + b"{}," * n + b"{}]"),  # many small containers
        st.binary(max_size=40),  # not JSON, not UTF-8, a BOM...
        st.sampled_from(
            [
                b'{"a": "\\ud800"}',
                b'["\\udfff", {"\\udbff": 1}]',
                b"\xef\xbb\xbf{}",
                b"\xff\xfe{\x00}\x00",
                b"",
                b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n",
            ]
        ),
    )


MODEL = st.fixed_dictionaries(
    {
        "config.json": file_content(CONFIG),
        "tokenizer_config.json": file_content(TOKENIZER_CONFIG),
        "generation_config.json": file_content(st.dictionaries(texts, values, max_size=3)),
        "tokenizer.json": file_content(TOKENIZER),
        "chat_template.jinja": st.one_of(st.none(), st.binary(max_size=40), texts.map(lambda t: t.encode("utf-8", "surrogatepass"))),
    }
)

# -- what the platform may pass -------------------------------------------------------------

FLAGS = [
    "--port",
    "--tokenizer",
    "--chat-template",
    "--hf-overrides",
    "--max-model-len",
    "--dtype",
    "--rope-theta",
    "--served-model-name",
    "--runner",
    "--task",
    "--trust-remote-code",
    "--model-impl",
    "--hf_overrides",
    "--chat_template",
]
arg_values = st.one_of(
    st.sampled_from(
        [
            '{"rope_theta": 5}',
            '{"architectures": ["X"]}',
            "{not json",
            "pooling",
            "embed",
            "auto",
            "8000",
            "/some/path",
            '{"a": {"b": NaN}}',
            "[1]",
            "",
        ]
    ),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
).filter(lambda v: not v.startswith("--"))
pair = st.one_of(
    st.tuples(st.sampled_from(FLAGS), arg_values).map(list),
    st.tuples(st.sampled_from(FLAGS), arg_values).map(lambda p: [f"{p[0]}={p[1]}"]),
    st.sampled_from([["--trust-remote-code"], ["--hf-overrides.rope_theta", "7"], ["--enforce-eager"]]),
)
user_args = st.lists(pair, max_size=4).map(lambda ps: [a for p in ps for a in p])
YAML_KEYS = ["tokenizer", "chat-template", "chat_template", "hf-overrides", "hf_overrides", "port", "runner", "task", "dtype"]
yaml_values = st.one_of(
    st.sampled_from(["'{\"rope_theta\": 5}'", "'{bad'", "true", "false", "8000", "pooling", "/x", "", "{a: 1}", "[1, 2]", "null"]),
    st.text("abc:#'\" {}", max_size=6),
)
config_file = st.one_of(st.none(), st.lists(st.tuples(st.sampled_from(YAML_KEYS), yaml_values), max_size=4))
environments = st.fixed_dictionaries(
    {},
    optional={
        "COMPAT_SKIP": st.sampled_from(["R2", "r5,H1", "R3,R3b", "nonsense", ""]),
        "COMPAT_CHAT_TEMPLATE": st.sampled_from(["off", "on"]),
        "COMPAT_TIMEOUT": st.sampled_from(["inf", "0.5", "-1", "nan", "30"]),
    },
)


@pytest.fixture(scope="module")
def scratch():
    base = Path(tempfile.mkdtemp(prefix="compat-fuzz-"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def case(scratch: Path, files, yaml_lines):
    """A model directory holding `files`, a work dir, and the --config file (or None)."""
    COUNT["examples"] += 1
    root = Path(tempfile.mkdtemp(dir=scratch))
    model = root / "model"
    model.mkdir()
    for name, content in files.items():
        if content is not None:
            (model / name).write_bytes(content)
    config = None
    if yaml_lines is not None:
        config = root / "serve.yaml"
        config.write_text("".join(f"{k}: {v}\n" for k, v in yaml_lines))
    try:
        yield model, root / "work", config
    finally:
        shutil.rmtree(root, ignore_errors=True)


def with_config(args, config):
    return (["--config", str(config)] + args) if config is not None else args


def engine_reads(user: list, card: str) -> UserArgs:
    """The user's arguments as the card's vLLM reads them: a --config file counts only on an
    engine that has the flag (vLLM 0.5.5 has none: it refuses the argument, the file is not read)."""
    return UserArgs(user, read_config=load_profile(card).serve_config_file is not False)


# -- the properties -------------------------------------------------------------------------


def assert_plan_holds(plan: Plan, user: list):
    data = plan.to_json()
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)  # strict JSON...
    text.encode("utf-8")  # ...that UTF-8 can carry
    assert all(type(a) is str for a in plan.args + plan.user_args)
    assert_user_args_kept(user, plan.user_args)
    given = engine_reads(user, plan.card)
    theirs = {flag_name(a) for a in given.args + given.config_args if flag_name(a)}
    ours = [flag_name(a) for a in plan.args if flag_name(a)]
    for flag in ours:
        merged_into_config = flag == "--hf-overrides" and flag not in {flag_name(a) for a in given.args if flag_name(a)}
        assert flag not in theirs or merged_into_config, (flag, plan.args, user)
    assert len(ours) == len(set(ours)), plan.args
    allowed = set()
    for repair in plan.repairs:
        if repair.verified is True:
            allowed |= set(repair.env) | set(repair.path_prepend)
    assert set(plan.env) <= allowed and set(plan.env) <= REPAIR_ENV
    assert all(type(k) is str and type(v) is str for k, v in plan.env.items())


def assert_user_args_kept(before: list, after: list):
    assert len(after) == len(before), (before, after)
    for i, (b, a) in enumerate(zip(before, after, strict=True)):
        if b == a:
            continue
        inline = b.split("=", 1)[0].replace("_", "-") == "--hf-overrides"
        follows = i > 0 and before[i - 1].replace("_", "-") == "--hf-overrides"
        assert inline or follows, (before, after)
        value = a.split("=", 1)[1] if inline else a
        assert isinstance(json.loads(value), dict)


# The cases of the issue, always run first.
ROPE_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0},
}
ISSUE_CASES = [
    {"config.json": _dump(ROPE_CONFIG), "tokenizer_config.json": b'{"extra_special_tokens": ' + _deep(100000) + b"}"},
    {"config.json": _dump(dict(ROPE_CONFIG, architectures=["Llama\ud800ForCausalLM"]))},
    {
        "config.json": _dump(ROPE_CONFIG),
        "tokenizer_config.json": _dump({"tokenizer_class": "TokenizersBackend", "extra_special_tokens": ["<a\udfff>", "<b>"]}),
    },
    {"config.json": _dump(dict(ROPE_CONFIG, rope_parameters={"rope_type": "yarn", "rope_theta": float("inf"), "factor": float("nan")}))},
    {name: b"[" + b"{}," * 300000 + b"{}]" for name in ("config.json", "tokenizer_config.json", "generation_config.json")},
    # Found by `make fuzz`: a MoE model type whose experts number 0 gets R11 on the BI-100's CPU
    # build (its plugin switch is a repair variable), and a float zero beside a huge rope part
    # made the MLA head size float arithmetic (OverflowError: every repair of the start lost).
    {"config.json": _dump({"model_type": "mixtral", "num_local_experts": 0})},
    {"config.json": _dump({"model_type": "deepseek_v2", "qk_nope_head_dim": 0.0, "qk_rope_head_dim": 10**400})},
    # Found by a run's fuzz seed: R5 handed on a nested text_config whole, with its Infinity.
    {"config.json": _dump({"text_config": {"head_dim": float("inf"), "rope_parameters": {"rope_type": "default", "rope_theta": 5.0}}})},
]
NAMES = ("config.json", "tokenizer_config.json", "generation_config.json", "tokenizer.json", "chat_template.jinja")


def issue_examples(test):
    for files in ISSUE_CASES:
        full = {name: files.get(name) for name in NAMES}
        test = example(
            files=full,
            args=["--port", "1", "--hf-overrides", '{"rope_theta": 5}'],
            yaml_lines=None,
            card="nv-a100",
            **({"extra_env": {}} if "extra_env" in test.__code__.co_varnames else {}),
        )(test)
        test = example(
            files=full,
            args=["--port", "1"],
            yaml_lines=[("tokenizer", "/t"), ("hf-overrides", "'{\"a\": 1}'")],
            card="iluvatar-bi100",
            **({"extra_env": {}} if "extra_env" in test.__code__.co_varnames else {}),
        )(test)
        # Found by `make fuzz`: a --config file on vLLM 0.5.5, which has no such flag, is not
        # read there, so R2's --chat-template does not repeat the file's chat-template.
        test = example(
            files={"tokenizer.json": b"{}"},
            args=[],
            yaml_lines=[("chat-template", "'{\"rope_theta\": 5}'")],
            card="iluvatar-bi100",
            **({"extra_env": {}} if "extra_env" in test.__code__.co_varnames else {}),
        )(test)
    return test


@FUZZ
@seed(SEED)
@given(files=MODEL, args=user_args, yaml_lines=config_file, card=st.sampled_from(CARDS), extra_env=environments)
@issue_examples
def test_build_plan_holds_the_red_lines(scratch, files, args, yaml_lines, card, extra_env):
    with case(scratch, files, yaml_lines) as (model, work, config):
        user = with_config(args, config)
        env = dict(extra_env, COMPAT_WORK_DIR=str(work))
        plan = build_plan(str(model), card, user, env, verify=False)
        assert_plan_holds(plan, user)
        for encoding in ("utf-8", "ascii"):
            assert json.loads(cli._plan_text(plan.to_json(), encoding), parse_constant=_no_constants) is not None


def _no_constants(token):
    raise AssertionError(f"non-strict JSON constant {token}")


@FUZZ
@seed(SEED)
@given(files=MODEL, args=user_args, yaml_lines=config_file, card=st.sampled_from(CARDS))
@issue_examples
def test_preflight_json_output_is_one_strict_json_object(scratch, files, args, yaml_lines, card, monkeypatch_env):
    with case(scratch, files, yaml_lines) as (model, work, config):
        user = with_config(args, config)
        monkeypatch_env(COMPAT_WORK_DIR=str(work))
        raw = io.BytesIO()
        out = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)  # as a real stdout
        with contextlib.redirect_stdout(out):
            code = cli.main(["preflight", str(model), "--card", card, "--json", "--no-verify", "--", *user])
        assert code == 0
        data = json.loads(raw.getvalue().decode("utf-8"), parse_constant=_no_constants)
        assert_user_args_kept(user, data["user_args"])


class Exec(BaseException):
    def __init__(self, file, argv, env):
        super().__init__(file)
        self.argv, self.env = argv, env


def _fake_exec(file, argv, env):
    raise Exec(file, list(argv), dict(env))


@FUZZ
@seed(SEED)
@given(files=MODEL, args=user_args, yaml_lines=config_file, card=st.sampled_from(CARDS), extra_env=environments)
@issue_examples
def test_launch_execs_vllm_with_the_users_args_last(scratch, files, args, yaml_lines, card, extra_env, fake_execvpe):
    with case(scratch, files, yaml_lines) as (model, work, config):
        user = with_config(args, config)
        env = dict(
            extra_env,
            MODEL_DIR=str(model),
            COMPAT_CARD=card,
            COMPAT_WORK_DIR=str(work),
            PATH="/usr/bin:/bin",
            COMPAT_ENGINE_PYTHON=str(work / "no-engine-python"),
            COMPAT_VLLM="vllm",
        )
        if "COMPAT_TIMEOUT" in env and env["COMPAT_TIMEOUT"] not in ("inf", "-1", "nan"):
            env["COMPAT_TIMEOUT"] = "30"  # a real timeout here would only test the machine's speed
        with pytest.raises(Exec) as caught:
            launch_module.launch(user, env)
        argv, got_env = caught.value.argv, caught.value.env
        assert all(type(a) is str for a in argv)
        assert argv[:3] == ["vllm", "serve", str(model)]
        tail = argv[len(argv) - len(user) :] if user else []
        assert_user_args_kept(user, tail)
        repairs = argv[3 : len(argv) - len(user)]
        given = engine_reads(user, card)
        theirs_cli = {flag_name(a) for a in given.args if flag_name(a)}
        theirs = theirs_cli | {flag_name(a) for a in given.config_args if flag_name(a)}
        for flag in filter(None, map(flag_name, repairs)):
            assert flag not in theirs or (flag == "--hf-overrides" and flag not in theirs_cli), (repairs, user)
        changed = {k for k in set(env) | set(got_env) if env.get(k) != got_env.get(k)}
        assert changed <= REPAIR_ENV, changed


@pytest.fixture
def fake_execvpe(monkeypatch):
    monkeypatch.setattr(os, "execvpe", _fake_exec)


@pytest.fixture
def monkeypatch_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("COMPAT_")]:
        monkeypatch.delenv(key)

    def set_env(**values):
        for key, value in values.items():
            monkeypatch.setenv(key, value)

    return set_env


def test_the_strategies_reach_the_hard_cases():
    """The generators do produce what the issue found (kept honest against refactors)."""
    assert b"\\ud800" in _dump("\ud800") and math.isnan(json.loads(_dump(float("nan"))))
    assert len(_deep(3000)) == 6000
