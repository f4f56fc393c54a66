"""The recurrent-state slots of a model that keeps a state per sequence (Qwen3.5's backport):
from the engine's request ids each step, a slot per running sequence, cleared for a prompt that
starts from nothing, kept across steps, copied for a forked sequence, freed when the request ends."""

import pytest

from common.vllm_plugin.compat_backports.layers.sequence_state import SequenceSlots


def test_a_prompt_gets_a_cleared_slot_and_its_decodes_keep_it():
    slots = SequenceSlots(4)
    prompt = slots.plan({"a": [0], "b": [1]}, [True, True])
    assert prompt.slots == [0, 1] and prompt.clear == [0, 1] and prompt.copies == []
    decode = slots.plan({"b": [1], "a": [0]}, [False, False])  # batch order is the runner's
    assert decode.slots == [1, 0] and decode.clear == [] and decode.copies == []


def test_a_finished_request_frees_its_slot_for_the_next_one():
    slots = SequenceSlots(2)
    slots.plan({"a": [0], "b": [1]}, [True, True])
    with pytest.raises(MemoryError):
        slots.plan({"c": [2]}, [True])
    slots.release(["a", "unknown"])  # an id the model never saw (finished before it ran) is no error
    assert slots.plan({"c": [2]}, [True]).slots == [0]
    with pytest.raises(ValueError, match="sequence 0 of request a continues"):
        slots.plan({"a": [0]}, [False])


def test_a_recomputed_sequence_is_cleared_not_continued():
    """Preemption by recomputation: the sequence comes back as a prompt over all its tokens."""
    slots = SequenceSlots(2)
    slots.plan({"a": [0]}, [True])
    slots.plan({"a": [0]}, [False])
    again = slots.plan({"a": [0]}, [True])
    assert again.slots == [0] and again.clear == [0]


def test_a_forked_sequence_starts_from_its_siblings_state():
    """Parallel sampling: the children appear after the prompt, each from the parent's state."""
    slots = SequenceSlots(4)
    slots.plan({"a": [0]}, [True])
    step = slots.plan({"a": [0, 1, 2]}, [False, False, False])
    assert step.slots == [0, 1, 2] and step.copies == [(0, 1), (0, 2)] and step.clear == []


def test_a_full_pool_changes_nothing_and_grows():
    slots = SequenceSlots(1)
    slots.plan({"a": [0]}, [True])
    with pytest.raises(MemoryError):
        slots.plan({"a": [0], "b": [1]}, [False, True])
    assert slots.held == {"a": {0: 0}} and slots.free == []
    slots.grow(3)
    step = slots.plan({"a": [0], "b": [1]}, [False, True])
    assert step.slots == [0, 1] and sorted(slots.free) == [2]


def test_a_batch_whose_tokens_do_not_match_its_sequences_is_refused():
    with pytest.raises(ValueError, match="2 sequences in the batch, 1 token runs"):
        SequenceSlots(4).plan({"a": [0], "b": [1]}, [True])
