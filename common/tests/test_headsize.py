import pytest

from common.model.headsize import detect_head_size


@pytest.mark.parametrize(
    "config, value, source",
    [
        ({"hidden_size": 4096, "num_attention_heads": 32}, 128, "hidden_size/num_attention_heads"),
        ({"hidden_size": 4096, "num_attention_heads": 32, "head_dim": 80}, 80, "head_dim"),
        (
            {"qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "head_dim": 64, "hidden_size": 7168, "num_attention_heads": 128},
            192,
            "qk_nope_head_dim+qk_rope_head_dim",
        ),
        ({"n_embd": 768, "n_head": 12}, 64, "n_embd/n_head"),
        # Falcon-40B's real config: no num_attention_heads.
        ({"model_type": "falcon", "hidden_size": 8192, "n_head": 128, "n_head_kv": 8}, 64, "hidden_size/n_head"),
        ({"model_type": "falcon", "hidden_size": 4544, "n_head": 71, "head_dim": None}, 64, "hidden_size/n_head"),
        ({"d_kv": 64, "d_model": 512, "num_heads": 8}, 64, "d_kv"),
        ({"model_type": "llava", "text_config": {"hidden_size": 2560, "num_attention_heads": 32}}, 80, "hidden_size/num_attention_heads"),
        ({"lm_config": {"head_dim": 72}}, 72, "head_dim"),
    ],
)
def test_forms(config, value, source):
    head = detect_head_size(config)
    assert (head.value, head.source, head.problem) == (value, source, None)


@pytest.mark.parametrize(
    "config, needle",
    [
        ({"head_dim": 0}, "not a positive integer"),
        ({"head_dim": -64}, "not a positive integer"),
        ({"head_dim": "128"}, "not a positive integer"),
        ({"head_dim": 10**9}, "implausibly large"),
        ({"hidden_size": 4096, "num_attention_heads": 0}, "not two positive integers"),
        ({"hidden_size": 4000, "num_attention_heads": 3}, "not divisible"),
        ({"hidden_size": 8192, "n_head": None}, "not two positive integers"),
        ({"vocab_size": 10}, "states no attention head size"),
    ],
)
def test_bad_values_are_problems(config, needle):
    head = detect_head_size(config)
    assert head.value is None and needle in head.problem


@pytest.mark.parametrize("nope", [0.0, False, -0.0])
def test_an_mla_nope_part_that_is_no_integer_is_said_and_never_float_arithmetic(nope):
    """`make fuzz` found it: a float zero beside a huge rope part overflowed (OverflowError lost
    every repair of the start); an integer zero is MLA without a nope part."""
    size = detect_head_size({"qk_nope_head_dim": nope, "qk_rope_head_dim": 10**400})
    assert size.value is None and "not integers" in size.problem
    assert detect_head_size({"qk_nope_head_dim": 0, "qk_rope_head_dim": 64}).value == 64
