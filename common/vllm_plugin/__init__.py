"""The image's vLLM plugin directory (R8-R12): put first on PYTHONPATH by a repair, never installed.

Python's importlib.metadata finds the `*.dist-info` here on sys.path, so vLLM's
`load_general_plugins()` sees the `vllm.general_plugins` entry point only in a process started
with this directory on PYTHONPATH (its name, `compat_weights`, is the one VLLM_PLUGINS allowlists;
its module is `compat_plugin`, whose register() installs the rest); the table modules it applies
(`compat_fused_experts`, `compat_weight_names`), the backports package (`compat_backports`, R10)
and the engine patches (`compat_patches`) are then top-level. The runtime package imports the same modules as `common.vllm_plugin.*` for
their tables; a backport's own module (torch, vLLM) is imported only inside the engine.

R12's config classes (`compat_configs`) cannot wait for the entry point: vLLM 0.5.5 reads
config.json before it loads general plugins. This directory's `sitecustomize.py`, which Python
runs at every interpreter start with the directory on sys.path, registers them when
COMPAT_CONFIGS names model types, and does nothing otherwise.
"""
