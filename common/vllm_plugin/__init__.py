"""The image's vLLM plugin directory (R8, R9): put first on PYTHONPATH by a repair, never installed.

Python's importlib.metadata finds the `*.dist-info` here on sys.path, so vLLM's
`load_general_plugins()` sees the `vllm.general_plugins` entry point only in a process started
with this directory on PYTHONPATH; `compat_weights` (the wrapper) and the table modules it applies
(`compat_fused_experts`, `compat_weight_names`) are then top-level modules. The runtime package
imports the same modules as `common.vllm_plugin.*` for their tables.
"""
