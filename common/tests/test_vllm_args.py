import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.engine.vllm_args import UNREADABLE, UserArgs, config_file_args, deep_merge, join_args


def test_user_flag_in_any_spelling_blocks_ours():
    for theirs in (["--chat-template", "/mine"], ["--chat-template=/mine"], ["--chat_template", "/mine"]):
        user = UserArgs(theirs)
        ours, user_args, problem = join_args(["--tokenizer", "/overlay", "--chat-template", "/t.jinja"], {}, user)
        assert ours == ["--tokenizer", "/overlay"]
        assert user_args == theirs and problem is None


def test_hf_overrides_are_merged_into_the_users_and_theirs_win():
    user = UserArgs(["--port", "8000", "--hf-overrides", '{"rope_theta": 5, "rope_scaling": {"factor": 2}}'])
    ours, user_args, problem = join_args([], {"rope_theta": 1e6, "rope_scaling": {"type": "yarn", "factor": 4}}, user)
    assert ours == [] and problem is None
    assert user_args[:3] == ["--port", "8000", "--hf-overrides"]
    assert json.loads(user_args[3]) == {"rope_theta": 5, "rope_scaling": {"type": "yarn", "factor": 2}}
    assert sum(a.startswith("--hf-overrides") for a in user_args) == 1


def test_hf_overrides_inline_form_and_unparseable_value():
    _, user_args, _ = join_args([], {"a": 1}, UserArgs(['--hf-overrides={"b": 2}']))
    assert user_args == ['--hf-overrides={"a": 1, "b": 2}']
    ours, user_args, problem = join_args([], {"a": 1}, UserArgs(["--hf-overrides", "not json"]))
    assert ours == [] and user_args == ["--hf-overrides", "not json"] and "not a JSON object" in problem


def test_ours_added_when_user_gives_none():
    ours, _, _ = join_args([], {"a": {"b": 1}}, UserArgs(["--port", "1"]))
    assert ours == ["--hf-overrides", '{"a": {"b": 1}}']


def test_deep_merge():
    assert deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}}) == {"a": {"x": 1, "y": 3}, "b": 1}


# Property: whatever the platform passes, its arguments survive in order (bar a merged
# --hf-overrides value) and no flag it gives is added a second time.

FLAGS = ["--tokenizer", "--chat-template", "--port", "--hf-overrides", "--max-model-len"]
values = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(lambda v: not v.startswith("--"))
user_lists = st.lists(st.tuples(st.sampled_from(FLAGS), values), max_size=4).map(lambda ps: [x for p in ps for x in p])


@given(user=user_lists)
def test_user_args_survive_and_flags_are_not_doubled(user):
    ours, user_args, _ = join_args(["--tokenizer", "/overlay", "--chat-template", "/t.jinja"], {"a": 1}, UserArgs(user))
    given_flags = {a for a in user if a in FLAGS}
    assert not given_flags & {a for a in ours if a.startswith("--")}
    assert len(user_args) == len(user)
    for i, (before, after) in enumerate(zip(user, user_args, strict=True)):
        if before != after:
            assert user[i - 1] == "--hf-overrides"  # only the value of their overrides may change


# -- the user's --config file counts as their flags (vLLM 0.6.2+ expands it before the command line)

ROOT = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = ROOT / ".venv-engine" / "bin" / "python"

SERVE_YAML = """\
# as the vLLM docs write it
tokenizer: /their/tokenizer
chat_template: /their/template.jinja
enable-prefix-caching: true
enforce_eager: false
allowed-origins: [a, b]
max-model-len: 4096
rope_theta: 1.0e+6
served-model-name: 'it''s mine'
hf-overrides: '{"rope_theta": 5}'
"""
EXPANDED = [
    "--tokenizer",
    "/their/tokenizer",
    "--chat_template",
    "/their/template.jinja",
    "--enable-prefix-caching",
    "--allowed-origins",
    "a",
    "b",
    "--max-model-len",
    "4096",
    "--rope_theta",
    "1000000.0",
    "--served-model-name",
    "it's mine",
    "--hf-overrides",
    '{"rope_theta": 5}',
]


@pytest.fixture
def serve_yaml(tmp_path):
    path = tmp_path / "serve.yaml"
    path.write_text(SERVE_YAML)
    return path


def test_config_file_expands_as_vllm_does(serve_yaml):
    assert config_file_args(["--port", "1", "--config", str(serve_yaml)]) == (EXPANDED, None)
    user = UserArgs(["--config", str(serve_yaml)])
    assert user.has("--chat-template") and user.has("--tokenizer") and not user.has("--enforce-eager")
    assert user.value("--max-model-len") == "4096"
    assert UserArgs(["--config", str(serve_yaml), "--max-model-len", "8"]).value("--max-model-len") == "8"


def test_config_file_flags_win_over_repairs_and_absorb_overrides(serve_yaml):
    user = UserArgs(["--config", str(serve_yaml), "--port", "1"])
    ours, user_args, problem = join_args(
        ["--tokenizer", "/overlay", "--chat-template", "/t.jinja", "--served-model-name", "x"],
        {"rope_theta": 1e6, "max_position_embeddings": 64},
        user,
    )
    assert problem is None and user_args == ["--config", str(serve_yaml), "--port", "1"]
    # On the command line, where vLLM lets it beat the file's own: theirs with ours under it.
    assert ours == ["--hf-overrides", '{"max_position_embeddings": 64, "rope_theta": 5}']


def test_only_the_exact_config_token_is_expanded_once(serve_yaml, tmp_path):
    assert UserArgs([f"--config={serve_yaml}"]).config_args == []  # vLLM does not expand that form either
    twice = UserArgs(["--config", str(serve_yaml), "--config", str(serve_yaml)])
    assert twice.config_args == [] and "more than once" in twice.config_problem
    other = tmp_path / "serve.json"
    other.write_text("{}")
    assert "not a .yaml" in UserArgs(["--config", str(other)]).config_problem
    assert "cannot be read" in UserArgs(["--config", str(tmp_path / "absent.yaml")]).config_problem
    assert "without a file" in UserArgs(["--config"]).config_problem
    assert UserArgs(["--config", str(serve_yaml)], read_config=False).config_args == []


@pytest.mark.parametrize(
    "content, reason",
    [
        ("", "no mapping"),
        ("- a\n- b\n", "no mapping"),
        ("a: [1\n", "could not be read"),
        ("1: x\n", "not text"),
        ("a: &x [*x, *x]\nb: &y [*x, *x, *x, *x]\nc: [*y, *y, *y, *y, *y, *y, *y, *y, *y, *y, *y, *y, *y, *y]\n", None),
        ("\xff", "could not be read"),
    ],
)
def test_a_config_file_vllm_cannot_read_is_a_problem_never_an_exception(tmp_path, content, reason):
    path = tmp_path / "c.yaml"
    path.write_bytes(content.encode("latin-1"))
    args, problem = config_file_args(["--config", str(path)])
    if reason is None:
        assert problem is None or "could not be read" in problem
    else:
        assert args == [] and reason in problem


def test_a_fifo_or_a_huge_config_file_is_not_read(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert "not a regular file" in UserArgs(["--config", str(fifo)]).config_problem  # and no hang
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(10 * 1024 * 1024)
    assert "over" in UserArgs(["--config", str(huge)]).config_problem


def test_dotted_hf_overrides_make_us_stand_back():
    ours, user_args, problem = join_args([], {"rope_theta": 1e6}, UserArgs(["--hf-overrides.rope_theta", "5"]))
    assert ours == [] and user_args == ["--hf-overrides.rope_theta", "5"] and "key by key" in problem


def test_deep_or_non_json_overrides_of_theirs_are_a_problem_not_a_crash():
    deep = "{" + '"a": {' * 5000 + "}" * 5001
    for theirs in (deep, "[1]", "{'python': 'repr'}", "{nan}"):
        ours, user_args, problem = join_args([], {"rope_theta": 1e6}, UserArgs(["--hf-overrides", theirs]))
        assert ours == [] and user_args == ["--hf-overrides", theirs] and "not a JSON object" in problem


def _without_pyyaml(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` now raises ImportError


def test_the_small_reader_agrees_with_pyyaml_where_it_reads(serve_yaml, monkeypatch):
    _without_pyyaml(monkeypatch)
    assert config_file_args(["--config", str(serve_yaml)]) == (EXPANDED, None)


def test_the_small_reader_stands_back_where_it_cannot_read(tmp_path, monkeypatch):
    _without_pyyaml(monkeypatch)
    path = tmp_path / "c.yaml"
    path.write_text("hf-overrides:\n  rope_theta: 5\ntokenizer: /t\nlimit-mm-per-prompt: {image: 2}\n")
    args, problem = config_file_args(["--config", str(path)])
    assert problem is None
    assert args == ["--hf-overrides", UNREADABLE, "--tokenizer", "/t", "--limit-mm-per-prompt", UNREADABLE]
    ours, _, problem = join_args(["--tokenizer", "/o"], {"a": 1}, UserArgs(["--config", str(path)]))
    assert ours == [] and "not a JSON object" in problem


flat_keys = st.sampled_from(
    [
        "tokenizer",
        "chat_template",
        "hf-overrides",
        "port",
        "max-model-len",
        "dtype",
        "runner",
        "served-model-name",
        "enforce-eager",
        "rope_theta",
    ]
)
flat_values = st.one_of(
    st.sampled_from(
        [
            "true",
            "false",
            "yes",
            "Off",
            "null",
            "~",
            "",
            "8000",
            "-3",
            "1_000",
            "0.5",
            "1.0e+6",
            "1e6",
            ".5",
            "'{\"a\": 1}'",
            '"{\\"a\\": 1}"',
            "'it''s'",
            "/a/b",
            "auto",
            "x # comment",
            "'#not a comment'",
            "[a, b]",
            "[]",
            "[1, 2.5, true]",
            "[x]  # c",
        ]
    ),
    st.from_regex(r"[A-Za-z/][A-Za-z0-9_./-]{0,8}", fullmatch=True),
)


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(st.tuples(flat_keys, flat_values), max_size=5, unique_by=lambda p: p[0]))
def test_property_small_reader_equals_pyyaml_on_flat_files(pairs, tmp_path_factory):
    import yaml

    path = tmp_path_factory.mktemp("yaml") / "c.yaml"
    path.write_text("".join(f"{k}: {v}\n" for k, v in pairs))
    expected = config_file_args(["--config", str(path)])
    saved = sys.modules.get("yaml")
    sys.modules["yaml"] = None
    try:
        got = config_file_args(["--config", str(path)])
    finally:
        sys.modules["yaml"] = saved if saved is not None else yaml
    if UNREADABLE not in got[0]:
        assert got == expected


@pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="needs .venv-engine (vLLM 0.11.0): make engine-env")
def test_the_expansion_is_vllm_0_11s_own(serve_yaml, tmp_path):
    """vLLM's FlexibleArgumentParser reads the same file into the same arguments."""
    code = (
        "import json, sys; from vllm.utils import FlexibleArgumentParser; "
        "print(json.dumps(FlexibleArgumentParser().load_config_file(sys.argv[1])))"
    )
    env = dict(os.environ, VLLM_LOGGING_LEVEL="ERROR")
    proc = subprocess.run(
        [str(ENGINE_PYTHON), "-c", code, str(serve_yaml)], capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path)
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == EXPANDED
