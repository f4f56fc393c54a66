"""R12's registration, run by Python itself at the start of every process of the engine.

vLLM 0.5.5 reads config.json (ModelConfig -> AutoConfig) before it loads its general plugins, so
the plugin's entry point comes too late to teach AutoConfig a model type. Python imports
`sitecustomize` from sys.path at startup, and R12's repair (like the plugin's) puts this
directory first on PYTHONPATH: here, when COMPAT_CONFIGS names model types, their classes of
compat_configs are registered with AutoConfig before any engine code runs. Without the variable
nothing is imported (every other Python that inherits the PYTHONPATH pays nothing). A
sitecustomize of the image's own, which this file shadows, is run after it.
"""

import os
import sys


def _register() -> None:
    value = os.environ.get("COMPAT_CONFIGS", "")  # compat_configs.ENV, spelled out: no import unless set
    if not value.strip():
        return
    import logging

    log = logging.getLogger("vllm.compat_configs")
    try:
        import compat_configs

        done = compat_configs.register(compat_configs.parse(value))
        if done:
            log.info("compat_configs: registered config classes for %s with AutoConfig", ", ".join(done))
    except Exception:  # a bug here must not stop the engine from starting
        log.exception("compat_configs: COMPAT_CONFIGS=%r could not be registered", value)


def _chain() -> None:
    """Run the sitecustomize this one shadows (the next on sys.path), as Python would have."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


# Only as Python's own sitecustomize: imported as common.vllm_plugin.sitecustomize (a tool
# walking the package) it neither registers nor runs another file.
if __name__ == "sitecustomize":
    _register()
    try:
        _chain()
    except Exception:  # as Python treats a failing sitecustomize: the process goes on
        pass
