"""R8's vLLM plugin directory: put first on PYTHONPATH by the repair, never installed.

Python's importlib.metadata finds the `*.dist-info` here on sys.path, so vLLM's
`load_general_plugins()` sees the `vllm.general_plugins` entry point only in a process started
with this directory on PYTHONPATH; `compat_fused_experts` is then a top-level module. The runtime
package imports the same module as `common.vllm_plugin.compat_fused_experts` for its tables.
"""
