"""R7: a vendor module the image's vLLM imports is missing from the image.

The BI-100 vLLM fork's mixtral.py runs `from ixformer.contrib.vllm.layers import
mixtral_decoder_layer_forward`, and some ixformer builds ship without that module: every Mixtral
model then dies with `ModuleNotFoundError: No module named 'ixformer.contrib.vllm.layers'`. When
the engine's model file really imports the module and the module is really absent, the image puts
a pure-PyTorch shim (common/shims) first on PYTHONPATH; the shim extends the real ixformer rather
than hiding it. The check reads files only: neither torch nor the vendor package is imported.
"""

from __future__ import annotations

import os

from ..plan import Repair
from .support.base import Context, Outcome, Rule

SHIM_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shims")

# vendor module -> (architectures whose engine model file imports it, that file under vllm/)
SHIMMED_MODULES = {
    "ixformer.contrib.vllm.layers": (("MixtralForCausalLM",), "model_executor/models/mixtral.py"),
}


def module_present(dotted: str) -> bool:
    """Whether `dotted` exists as a file or package under its top-level package (no import)."""
    from ..engine.patching import module_location  # past the architecture test: other models never pay for it

    return module_location(dotted) is not None


def engine_imports(model_file: str, dotted: str) -> bool:
    from ..engine.patching import package_dir  # past the architecture test: other models never pay for it

    vllm_dir = package_dir("vllm")
    if vllm_dir is None:
        return False
    try:
        with open(os.path.join(vllm_dir, model_file), encoding="utf-8", errors="replace") as fh:
            return dotted in fh.read()
    except OSError:
        return False


class VendorModuleShim(Rule):
    code = "R7"

    def check(self, ctx: Context) -> Outcome:
        architectures = ctx.facts.get("architectures") or []
        outcome = Outcome()
        for dotted, (users, model_file) in SHIMMED_MODULES.items():
            if not set(architectures) & set(users):
                continue
            if not engine_imports(model_file, dotted) or module_present(dotted):
                continue
            repair = Repair(self.code, self.title, f"{dotted} is imported by vllm/{model_file} but absent; using the pure-PyTorch shim")
            repair.path_prepend = {"PYTHONPATH": SHIM_DIR}
            outcome.repairs.append(repair)
        return outcome


RULE = VendorModuleShim()
