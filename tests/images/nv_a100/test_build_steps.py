"""nv-a100: L2 checks the image's vLLM 0.11 Triton backend; its transformers is left as shipped."""

from tests.images.build_steps import L1_NOT_APPLIED, apply_again, l1_state

CARD = "nv-a100"


def test_l2_checks_the_images_vllm_and_transformers_is_untouched(images, containers):
    assert "L2 check passed" in apply_again(containers, images[CARD]["tag"], "L2")
    # The file L1 would patch is the base image's, byte for byte, with no backup beside it.
    assert l1_state(containers, images[CARD]) == L1_NOT_APPLIED
