import json

from hypothesis import given
from hypothesis import strategies as st

from common.vllm_args import UserArgs, deep_merge, join_args


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
