"""hygon-k100: L1 patched the image's transformers 4.57; L2 checks its vLLM's Triton backend."""

from tests.images.build_steps import L1_APPLIED, apply_again, l1_state

CARD = "hygon-k100"


def test_l1_and_l2_ran_on_the_images_own_packages(images, containers):
    """The patched file carries L1, and its backup is the base image's own file byte for byte."""
    assert l1_state(containers, images[CARD]) == L1_APPLIED
    out = apply_again(containers, images[CARD]["tag"], "L1", "L2")
    assert "L1 unchanged" in out and "L2 check passed" in out
