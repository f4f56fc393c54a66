"""The image's vLLM general plugin: model classes the engine lacks, and checkpoint tensors turned
into the names the engine loads.

COMPAT_BACKPORTS=<architecture:module,...> (R10): each named class of compat_backports/ is registered
with the engine's ModelRegistry, unless the engine has its own.
COMPAT_CPU_MOE=grouped (R11): the fused MoE layer of a CPU build gets a CPU path (compat_patches/cpu_moe.py).
(COMPAT_CONFIGS, R12, is not this module's: sitecustomize.py registers those config classes at
interpreter start, before vLLM reads config.json.)
One wrapper around the engine's weight iterator (DefaultModelLoader._get_weights_iterator)
applies every transform the preflight asked for, each named by its own variable:
- COMPAT_WEIGHT_NAMES=<scheme> (R9): a vision tower saved by transformers 5 without its
  `vision_model.` level gets it back (compat_weight_names.py);
- COMPAT_FUSED_EXPERTS=<layout> (R8): MoE experts stored fused are split per expert
  (compat_fused_experts.py).
Renames come first, so a split sees the published name. The engine's own loader does the rest.

It acts only when asked: vLLM finds the entry point only in a process started with this
directory on PYTHONPATH, and `register()` does nothing unless one of the variables names a known
transform (the preflight's repairs set both). Standard library only, no import-time work: the
preflight imports this module for PLUGIN_NAME on every container start, and the hook handles the
engine's tensors through their own methods, so importing it never imports torch.
"""

from __future__ import annotations

import importlib
import os

try:  # as common.vllm_plugin.compat_plugin (the preflight's import)
    from . import compat_backports as backports
    from .compat_patches import cpu_moe, cpu_requests, cpu_windows
    from . import compat_fused_experts as fused_experts
    from . import compat_weight_names as weight_names
except ImportError:  # as the top-level module vLLM's entry point names (the plugin dir on PYTHONPATH)
    import compat_backports as backports  # type: ignore[no-redef]
    from compat_patches import cpu_moe, cpu_requests, cpu_windows  # type: ignore[no-redef]
    import compat_fused_experts as fused_experts  # type: ignore[no-redef]
    import compat_weight_names as weight_names  # type: ignore[no-redef]

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

PLUGIN_NAME = "compat_weights"  # the entry point's name: what VLLM_PLUGINS must allow

# Where vLLM keeps the loader whose iterator is wrapped: 0.6+ (default_loader.py), then 0.5.x.
LOADER_MODULES = ("vllm.model_executor.model_loader.default_loader", "vllm.model_executor.model_loader.loader")
LOADER_CLASS = "DefaultModelLoader"
HOOK = "_get_weights_iterator"

# transform -> (its environment variable, the values it knows). The keys name the transforms in
# the wrapper's `compat_weights` attribute and in the log.
TRANSFORMS = {
    "weight_names": (weight_names.ENV, weight_names.SCHEMES),
    "fused_experts": (fused_experts.ENV, fused_experts.LAYOUTS),
}


def _log():
    """The plugin's logger, under "vllm" (the engine's own log format). Imported here, not at the
    top: the preflight imports this module on every container start."""
    import logging

    return logging.getLogger("vllm.compat_weights")


def asked(env: Dict[str, str]) -> Dict[str, str]:
    """transform -> value for each transform whose variable names a known value; logs the others."""
    wanted = {}
    for transform, (var, known) in TRANSFORMS.items():
        value = env.get(var, "")
        if value in known:
            wanted[transform] = value
        elif value:
            _log().warning("%s: %s=%r names nothing it knows (%s); ignored", PLUGIN_NAME, var, value, ", ".join(known))
    return wanted


def transform_weights(weights: Iterable[Tuple[str, Any]], wanted: Dict[str, str]) -> Iterator[Tuple[str, Any]]:
    """The engine's weight iterator with the asked transforms applied; counts each in the log."""
    scheme, layout = wanted.get("weight_names"), wanted.get("fused_experts")
    renamed = split = 0
    for name, tensor in weights:
        if scheme is not None:
            new = weight_names.rename(name, scheme)
            renamed += new != name
            name = new
        if layout is None:
            yield name, tensor
            continue
        if fused_experts.fused_part(fused_experts.rename(name, layout))[1]:
            split += 1
        yield from fused_experts.split(name, tensor, layout)
    if scheme is not None:
        _log().info("%s: renamed %d vision tower weights to the published layout (scheme %s)", PLUGIN_NAME, renamed, scheme)
    if layout is not None:
        _log().info("%s: split %d fused expert tensors into per-expert weights (layout %s)", PLUGIN_NAME, split, layout)


# Architectures this process registered: vLLM calls general plugins more than once per process.
_REGISTERED: set = set()


def register_backports(env: Dict[str, str]) -> None:
    """Register each backport COMPAT_BACKPORTS names with the engine's ModelRegistry; a class the
    engine already has (its own) is left to it, unless the backport is one that replaces it (R10
    named it for a configuration the engine's class computes differently). A backport that fails
    to import is logged and skipped: the engine then says the architecture is not supported, or
    serves its own class, as without the plugin."""
    names = [n.strip() for n in env.get(backports.ENV, "").split(",") if n.strip()]
    if not names:
        return
    from vllm import ModelRegistry

    for key in names:
        backport = backports.by_key(key)
        if backport is None:
            _log().warning("%s: %s names %r, which has no backport here; ignored", PLUGIN_NAME, backports.ENV, key)
            continue
        name = backport.architecture
        if name in _REGISTERED:
            continue
        if name in ModelRegistry.get_supported_archs() and not backport.replaces:
            _log().info("%s: the engine has its own %s; the backport is not used", PLUGIN_NAME, name)
            continue
        try:
            ModelRegistry.register_model(name, backport.load())
        except Exception:
            _log().exception("%s: the backport of %s could not be registered", PLUGIN_NAME, name)
            continue
        _REGISTERED.add(name)
        _log().info("%s: registered the backport of %s (compat_backports.%s)", PLUGIN_NAME, name, backport.module)
        if backport.cpu_windows:
            # Its windowed layers are served right only by a backend that honours each one's
            # window (vLLM 0.5.5's CPU build; the V1 engine's Attention takes each layer's own).
            cpu_windows.install(_log())
        if backport.recurrent == backports.OWN_POOL:
            # Its per-sequence state is kept only where the model runner hands it its requests
            # (vLLM 0.5.5's protocol; a V1 engine keeps a hybrid's states itself).
            cpu_requests.install(_log())


def _find_loader() -> Optional[Any]:
    for module in LOADER_MODULES:
        try:
            cls = getattr(importlib.import_module(module), LOADER_CLASS, None)
        except ImportError:
            continue
        if cls is not None and callable(getattr(cls, HOOK, None)):
            return cls
    return None


def _wrap(original: Callable[..., Any], wanted: Dict[str, str]) -> Callable[..., Any]:
    def _get_weights_iterator(self: Any, *args: Any, **kwargs: Any) -> Iterator[Tuple[str, Any]]:
        return transform_weights(original(self, *args, **kwargs), wanted)

    _get_weights_iterator.compat_weights = dict(wanted)  # type: ignore[attr-defined]
    _get_weights_iterator.__wrapped__ = original  # type: ignore[attr-defined] - inspect sees the engine's signature
    return _get_weights_iterator


def register() -> None:
    """vLLM's entry point: register the backports and wrap the weight iterator, as the environment asks.

    vLLM calls general plugins once per process (API server, engine core, workers) and does not
    catch what they raise at that point in every version: nothing here raises."""
    try:
        register_backports(dict(os.environ))
    except Exception:  # a bug here must not stop the engine from starting
        _log().exception("%s: could not register the backports", PLUGIN_NAME)
    try:
        if os.environ.get(cpu_moe.ENV) in cpu_moe.MODES:
            cpu_moe.install(_log())
    except Exception:  # a bug here must not stop the engine from starting
        _log().exception("%s: could not give the fused MoE its CPU path", PLUGIN_NAME)
    try:
        wanted = asked(dict(os.environ))
        if not wanted:
            return  # discovered, not asked for: the engine stays untouched
        cls = _find_loader()
        if cls is None:
            _log().warning("%s: no %s.%s in %s; weights are loaded as stored", PLUGIN_NAME, LOADER_CLASS, HOOK, " or ".join(LOADER_MODULES))
            return
        current = getattr(cls, HOOK)
        done = getattr(current, "compat_weights", None)
        if done == wanted:
            return  # this process already wrapped it
        original = current.__wrapped__ if done is not None else current  # never two wrappers
        setattr(cls, HOOK, _wrap(original, wanted))
        what = ", ".join(f"{transform}={value}" for transform, value in wanted.items())
        _log().info("%s: %s.%s wraps the weights (%s)", PLUGIN_NAME, cls.__module__, LOADER_CLASS, what)
    except Exception:  # a bug here must not stop the engine from starting
        _log().exception("%s: could not wrap the weight iterator; weights are loaded as stored", PLUGIN_NAME)
