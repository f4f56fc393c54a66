"""The engine patches of the plugin: each module replaces one engine method or class in the running
process. What each changes, why, on which engines and until when is in the project's one ledger of
every patch (compat_build/patch_ledger.toml, held to the tree by tests/unit/test_patch_ledger.py).

A patch is installed by the plugin (compat_plugin.register) only where a repair or a backport asks
for it, and leaves every other model on the engine's own code. Each module's `install(log)` says so
in one log line and returns False, changing nothing, where the engine lacks what it patches. On the
cards the vendors' builds run their own kernels: these patches make the CPU builds the tests run
compute what the card computes.
"""
