"""Imports every model module an engine's vLLM registers, in that engine's Python: what a model
build of each architecture imports first. Answers {module: "ExceptionType: message"} for the modules
that failed to import (the last line of stdout; tests/engine.py's Engine.probe).

usage: (payload on stdin: null) ENGINE_PYTHON tests/model_modules_probe.py
"""

import importlib
import json
import sys

sys.stdin.read()
from vllm.model_executor.models.registry import _VLLM_MODELS  # noqa: E402

failed = {}
for module in sorted({module for module, _ in _VLLM_MODELS.values()}):
    name = module if module.startswith("vllm.") else f"vllm.model_executor.models.{module}"
    try:
        importlib.import_module(name)
    except Exception as exc:  # the import's own failure, whatever it is, is the answer
        failed[module] = f"{type(exc).__name__}: {exc}"[:500]
print(json.dumps({"modules": len({m for m, _ in _VLLM_MODELS.values()}), "failed": failed}))
