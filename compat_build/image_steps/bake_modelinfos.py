"""Write vLLM's model-class inspections into a vLLM cache directory, as vLLM writes them itself.

usage: python3 -m compat_build.image_steps.bake_modelinfos CACHE_ROOT

vLLM >= 0.10 resolves a model's architecture by inspecting its class (text generation or
pooling, multimodal, pipeline parallel, ...) in a subprocess that imports vLLM a second time, 8-10
s before the engine does anything, unless CACHE_ROOT/modelinfos holds that class's inspection
(one JSON file per class, keyed by the md5 of its module's source: a changed module is inspected
again). Each start in an empty cache pays that subprocess once per architecture it resolves.

This runs vLLM's own inspection, cache file names and format for every architecture of vLLM's
registry in this one process (about a second after vLLM's import): what the first start of each
architecture would have written. An architecture whose module does not import on this machine
gets no entry, as its subprocess would have failed and cached nothing. Out-of-tree classes (a
plugin's) are not in the registry yet and stay vLLM's to inspect at their first start.
A vLLM without this cache (0.5.x inspects in-process) is said and left alone.

Prints one line; exits 1 only when vLLM itself does not import.
"""

import os
import sys
from typing import List, Tuple


def bake(cache_root: str) -> Tuple[int, List[str]]:
    """(architectures written, architectures whose module does not import here)."""
    os.environ["VLLM_CACHE_ROOT"] = cache_root  # read by vLLM's envs at each access
    import vllm  # noqa: F401  an ImportError here is the caller's to report

    try:
        from vllm.model_executor.models import registry
    except ImportError:  # vLLM 0.5.x: no registry module, no cache
        return 0, []
    lazy = getattr(registry, "_LazyRegisteredModel", None)
    if lazy is None or not hasattr(registry, "_run_in_subprocess"):
        return 0, []
    # What vLLM's subprocess does first (registry._run): the general plugins, then the inspection.
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    # The inspection itself is vLLM's, run here instead of in a child: the child exists only to
    # keep CUDA from being initialised in the engine's own process.
    registry._run_in_subprocess = lambda fn: fn()
    written, failed = 0, []
    for architecture, model in sorted(registry.ModelRegistry.models.items()):
        if not isinstance(model, lazy):
            continue
        try:
            model.inspect_model_cls()
        except Exception:  # noqa: BLE001  an import error here is one vLLM's subprocess would raise too
            failed.append(architecture)
        else:
            written += 1
    return written, failed


def readable_by_all(top: str) -> None:
    """vLLM writes its entries owner-only (a temporary file renamed into place); an image runs as
    any uid, whose copy of them must be able to read them."""
    for directory, _, files in os.walk(top):
        os.chmod(directory, 0o755)
        for name in files:
            os.chmod(os.path.join(directory, name), 0o644)


def main(argv: List[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cache_root = os.path.abspath(argv[0])
    try:
        written, failed = bake(cache_root)
    except ImportError as exc:
        print(f"modelinfos: vLLM does not import for {sys.executable}: {exc}", file=sys.stderr)
        return 1
    if os.path.isdir(os.path.join(cache_root, "modelinfos")):
        os.chmod(cache_root, 0o755)
        readable_by_all(os.path.join(cache_root, "modelinfos"))
    if not written and not failed:
        print(f"modelinfos: this vLLM keeps no model-class inspections ({sys.executable}): nothing to write")
        return 0
    print(
        f"modelinfos: {written} architectures inspected into {os.path.join(cache_root, 'modelinfos')}"
        + (
            f"; {len(failed)} do not import here (left to vLLM: {', '.join(failed[:5])}{', ...' if len(failed) > 5 else ''})"
            if failed
            else ""
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
