"""nv-a100: L2 checks the image's vLLM 0.11 Triton backend; its transformers is left as shipped."""

from tests.images.build_steps import apply_again, l1_applied

CARD = "nv-a100"


def test_l2_checks_the_images_vllm_and_transformers_is_untouched(images, containers):
    tag = images[CARD]["tag"]
    assert "L2 check passed" in apply_again(containers, tag, "L2")
    assert not l1_applied(containers, tag)
