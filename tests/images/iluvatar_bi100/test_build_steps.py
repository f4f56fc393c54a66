"""iluvatar-bi100: L1 on the image's transformers 4.55, L3's ops in the vendor's ixformer tree,
and the vendor build's missing `ixformer.contrib.vllm.layers` (what R7 shims) still missing."""

from tests.images.build_steps import L1_APPLIED, STEPS_ENV, apply_again, l1_state, module_file
from tests.images.conftest import in_image

CARD = "iluvatar-bi100"


def test_l1_ran_on_the_images_transformers(images, containers):
    """The patched file carries L1, and its backup is the base image's own file byte for byte."""
    assert l1_state(containers, images[CARD]) == L1_APPLIED
    assert "L1 unchanged" in apply_again(containers, images[CARD]["tag"], "L1")


def test_l3_put_the_cards_ops_into_the_vendor_package(images, containers):
    tag = images[CARD]["tag"]
    init = module_file(containers, tag, "ixformer.functions")
    assert "from .gelu_tanh_and_mul import *" in in_image(containers, tag, "init", "cat", init)
    # The vendor package exports the op, and on the image's torch it computes its contract.
    code = (
        "import torch, torch.nn.functional as F, ixformer.functions as f\n"
        "x = torch.randn(3, 8); out = torch.empty(3, 4); f.gelu_tanh_and_mul(out, x)\n"
        "print(torch.allclose(out, F.gelu(x[:, :4], approximate='tanh') * x[:, 4:]))"
    )
    assert in_image(containers, tag, "run-op", "python3", "-c", code).strip() == "True"
    # The runtime shim is not baked in: the module R7 supplies is absent from the image.
    probe = "from common.rules.r7_vendor_module_shim import module_present; print(module_present('ixformer.contrib.vllm.layers'))"
    assert in_image(containers, tag, "r7-absent", "python3", "-c", probe, env=STEPS_ENV).strip() == "False"
