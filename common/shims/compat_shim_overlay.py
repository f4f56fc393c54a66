"""Make a shim package an extension of the real package of the same name, when one exists.

The shim directory goes first on PYTHONPATH, so its `ixformer` is found before the vendor's. On
its own that would hide every real ixformer module; instead each shim `__init__` calls `extend()`,
which appends the real package's directory to `__path__` and runs the real `__init__` in the shim
module's namespace. The vendor's modules then import as before, and only what the vendor build
lacks (contrib.vllm.layers) comes from the shim.
"""

import os
import sys

SHIM_ROOT = os.path.dirname(os.path.abspath(__file__))


def extend(module_globals: dict) -> None:
    name = module_globals["__name__"]
    parts = name.split(".")
    for entry in sys.path:
        root = os.path.abspath(entry or os.getcwd())
        if root == SHIM_ROOT:
            continue
        real_dir = os.path.join(root, *parts)
        real_init = os.path.join(real_dir, "__init__.py")
        if os.path.isfile(real_init):
            module_globals["__path__"].append(real_dir)
            with open(real_init, encoding="utf-8") as fh:
                code = compile(fh.read(), real_init, "exec")
            exec(code, module_globals)
            return
