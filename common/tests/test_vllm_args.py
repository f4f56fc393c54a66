import json

from common.vllm_args import UserArgs, deep_merge, join_args


def test_user_flag_in_any_spelling_blocks_ours():
    for given in (["--chat-template", "/mine"], ["--chat-template=/mine"], ["--chat_template", "/mine"]):
        user = UserArgs(given)
        ours, user_args, problem = join_args(["--tokenizer", "/overlay", "--chat-template", "/t.jinja"], {}, user)
        assert ours == ["--tokenizer", "/overlay"]
        assert user_args == given and problem is None


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
