"""hygon-k100: L1 patched the image's transformers 4.57; L2 checks its vLLM's Triton backend."""

from tests.images.build_steps import apply_again, l1_applied

CARD = "hygon-k100"


def test_l1_and_l2_ran_on_the_images_own_packages(images, containers):
    tag = images[CARD]["tag"]
    assert l1_applied(containers, tag)
    out = apply_again(containers, tag, "L1", "L2")
    assert "L1 unchanged" in out and "L2 check passed" in out
