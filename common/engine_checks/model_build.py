"""Build the engine's own model class for a model on the meta device: the engine side of doctor's
MB check (engine_checks/process.py answers `model_build` requests with it, importing this module
only for them: everything else it answers stays torch-free).

A start that gets past the model's metadata can still be refused when the engine constructs its
model class: vLLM's model code raises on configuration values it does not serve (Llama's MLP on a
hidden_act other than silu, Gemma 2's on an activation other than tanh-GELU, the divisibility
asserts of the sharded layers at a tensor-parallel size, the image's own backports on what they
leave out). Here the engine does what its model loader does, short of weights and memory:

  1. the image's plugin is registered as the image's engine process registers it (the repairs'
     environment: COMPAT_CONFIGS' config classes as sitecustomize.py does, then the plugin's entry
     point, compat_plugin.register, with COMPAT_BACKPORTS and the rest set);
  2. the engine's own argument parser and EngineArgs(...).create_engine_config() build its config
     objects from the platform's arguments (the repairs' ones in front), for the path the engine
     is given (the model, or the model view doctor made);
  3. the model class the engine's registry resolves (get_model_architecture) is constructed as
     its DefaultModelLoader constructs it (the engine's set_default_torch_dtype, and on 0.6.4+ its
     initialize_model inside set_current_vllm_config), its weights on the meta device (a torch
     function mode sends every large tensor there, small ones to the CPU so that the model code
     can compute with them, and a "cuda" the code names to either): every weight gets its shape,
     none gets memory, nothing is read from the weight files.

The distributed state is one process (gloo, world size 1), made once. A tensor-parallel size N
is given to the model code by setting the tensor-parallel group's world size to N while it is
built (rank 0): every layer then shards, pads and asserts divisibility exactly as rank 0 of N
does, without N processes (which the engine's CPU build here cannot start: its workers need
CUDA's NCCL, and nothing is computed that would need the other ranks). Pipeline parallelism is
not faked: the model is built whole.

The attention kernels are the card's, not the CPU build's: the CPU platform refuses to pick a
backend for MLA on 0.11, and its backends refuse soft-capping. Such a refusal is noted in the
answer and the CPU build's own backend stands in, so the model code around it is built all the
same (H1 judges the card's kernels against its profile). Nor does 0.11 take its CPU-only way back
from the V1 engine to V0 for sliding windows here (the card runs V1), and the registry inspects a
model class in this process rather than in a child Python of its own (seconds per architecture).

The answer says who refused. ok false: the exception was raised in the engine's model code
(vllm/model_executor/models/ and layers/, the Attention layer, the divisibility check of
vllm/distributed/utils.py), in its config checks of the model at the parallel sizes asked
(verify_with_parallel_config), or in the image's plugin (its backports and config classes), with
the engine's exception type and message and the file:line of the raising frame (a pydantic
ValidationError is unwrapped to what the engine raised). ok null ("cannot tell"): vLLM is not
importable, the harness itself failed, a module failed to import (a package the CPU build here
lacks: vllm_flash_attn on 0.5.5, torchvision on 0.11, a Triton that runs), or the failure came from
a part of the engine the CPU build runs differently from the card (the platform, CUDA, quantization
and fused-MoE kernels, the rest of its config checks), or from the meta device itself. Where the
engine found no kernel for a layer and lists each backend's reason, the answer names the CPU
build's own (vLLM 0.32's block-scaled FP8 and MXFP4 MoE kernels ask for AMX tiles), not the card's.

Checked against the conformance matrix's tiny models (every case, every saver, each engine's
platform arguments): no model whose greedy tokens the engine served exactly is refused.

Standalone like process.py: of the runtime package, nothing beside the checks' own modules and the
package's PLUGIN_DIR.
"""

import contextlib
import linecache
import os
import re
import sys
import time
import traceback

from common import PLUGIN_DIR  # by name, as process.py imports this module (it checked `common` is ours)


# Where a raising frame makes the exception the model's refusal (paths under the vllm package).
# (attention/layer.py: 0.5.5's and 0.11's Attention layer, which asserts on the head counts.)
MODEL_CODE = ("model_executor/models/", "model_executor/layers/", "attention/layer.py", "distributed/utils.py")
# ... except these, whose code depends on the platform's kernels: the CPU build here is not the card.
PLATFORM_CODE = ("model_executor/layers/quantization/", "model_executor/layers/fused_moe/")
# The engine's config checks that are facts of the model at the parallel sizes asked, on every
# platform (attention heads divisible by the tensor-parallel size, pipeline parallelism supported
# by the architecture): a refusal there is the model's, raised before any class is built.
# (0.32's validate_fp8_block_shape[_moe]: a block-quantized weight's shard at the tensor-parallel size asked
# is not a whole number of its blocks, checked before any kernel is chosen.)
CONFIG_REFUSALS = ("verify_with_parallel_config", "validate_fp8_block_shape", "validate_fp8_block_shape_moe")
# The image's plugin directories whose refusals are the image's own (on every card).
PLUGIN_CODE = ("compat_backports/", "compat_configs/")
MESSAGE_CHARS = 1000
NO_MESSAGE = "(no message)"


class Unanswerable(Exception):
    """The harness could not ask the engine (ok null)."""


# ---- the engine's pieces, by generation --------------------------------------------------------


def _argument_parser():
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # 0.12+
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # 0.5.5 .. 0.11
    return FlexibleArgumentParser()


def _engine_args(path, args):
    """The engine's AsyncEngineArgs for `vllm serve PATH ARGS`, read by its own parser (flags of the
    OpenAI front end, --port or --chat-template, are not the engine's: left over, ignored)."""
    from vllm.engine.arg_utils import AsyncEngineArgs

    parser = AsyncEngineArgs.add_cli_args(_argument_parser())
    try:
        namespace, _ = parser.parse_known_args(["--model", path] + list(args))
    except SystemExit as exc:  # argparse's own way of refusing: the start would not get this far
        raise Unanswerable(f"the engine's argument parser refuses {args} (exit {exc.code})") from None
    engine_args = AsyncEngineArgs.from_cli_args(namespace)
    parallel = int(getattr(engine_args, "tensor_parallel_size", 1) or 1) * int(getattr(engine_args, "pipeline_parallel_size", 1) or 1)
    if parallel > 1 and getattr(engine_args, "distributed_executor_backend", None) is None:
        # Which executor starts the ranks does not change how the model class is built, and none is
        # started here; left unset, vLLM 0.5.5 looks for as many GPUs as ranks, or for Ray, first.
        engine_args.distributed_executor_backend = "mp"
    return engine_args


def _set_current(config):
    """vLLM 0.6.4+'s set_current_vllm_config (layers read the config from it), else nothing."""
    try:
        from vllm.config import set_current_vllm_config
    except ImportError:
        return contextlib.nullcontext()
    return set_current_vllm_config(config)


_DISTRIBUTED = {"ready": False}


def _free_port():
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _init_distributed(config):
    """One process group of one rank (gloo), and the engine's model-parallel groups over it, made
    once per process for every model after it. Made inside a current config of no model (0.6.4+
    reads the current config there): 0.12+ then makes every group, the expert-parallel one too
    (which it makes only for MoE models when it knows the model), and data parallelism is 1 (the
    group here is this one process, whatever the platform asks)."""
    if _DISTRIBUTED["ready"]:
        return
    from vllm.distributed import parallel_state

    try:
        from vllm.config import set_current_vllm_config
    except ImportError:  # 0.5.x: no current config
        context = contextlib.nullcontext()
    else:
        context = set_current_vllm_config(type(config)())
    with context:
        if not parallel_state.model_parallel_is_initialized():
            parallel_state.init_distributed_environment(
                world_size=1, rank=0, distributed_init_method=f"tcp://127.0.0.1:{_free_port()}", local_rank=0, backend="gloo"
            )
            parallel_state.ensure_model_parallel_initialized(1, 1)
    _DISTRIBUTED["ready"] = True


@contextlib.contextmanager
def _tensor_parallel(size):
    """The tensor-parallel group seen as `size` ranks, this process rank 0, while the model is built
    (see the module's docstring: the engine's layers read get_tensor_model_parallel_world_size(),
    i.e. this group's world_size, everywhere)."""
    from vllm.distributed import parallel_state

    group = parallel_state.get_tp_group()
    saved = (group.world_size, group.rank_in_group)
    group.world_size, group.rank_in_group = size, 0
    try:
        yield
    finally:
        group.world_size, group.rank_in_group = saved


def _set_default_dtype(dtype):
    try:
        from vllm.model_executor.model_loader.utils import set_default_torch_dtype
    except ImportError:  # where a generation keeps it elsewhere: the same two lines
        import torch

        @contextlib.contextmanager
        def set_default_torch_dtype(dtype):
            old = torch.get_default_dtype()
            torch.set_default_dtype(dtype)
            try:
                yield
            finally:
                torch.set_default_dtype(old)

    return set_default_torch_dtype(dtype)


# Tensors made while the model is built with at least this many elements (its weights) go to the
# meta device, which gives them a shape and no memory; smaller ones (norms, ALiBi slopes, rotary
# frequencies, scalars) are made on the CPU, where the model code can compute with them as it does
# on the card (BLOOM's and MPT's ALiBi slopes go through .tolist(), which a meta tensor refuses).
LARGE = 1 << 20


def _is_accelerator(device):
    """A device the card has and this CPU does not ("cuda", cuda:0, an index)."""
    import torch

    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        return False
    try:
        return torch.device(device).type not in ("cpu", "meta")
    except (RuntimeError, ValueError, TypeError):
        return False


def _numel(func, args, kwargs):
    """How many elements a tensor constructor call makes (0 when it cannot say: data given)."""
    import torch

    size = kwargs.get("size", args[0] if args else None)
    if func in (torch.arange, torch.range):
        numbers = [a for a in args if isinstance(a, (int, float))]
        if len(numbers) == 1:
            return int(numbers[0])
        if len(numbers) >= 2:
            step = numbers[2] if len(numbers) > 2 and numbers[2] else 1
            return int(abs((numbers[1] - numbers[0]) / step))
        return 0
    if isinstance(size, (tuple, list, torch.Size)):
        dims = list(size)
    else:
        dims = []
        for arg in args:
            if not isinstance(arg, int) or isinstance(arg, bool):
                break
            dims.append(arg)
    total = 1
    for dim in dims:
        if not isinstance(dim, int):
            return 0
        total *= dim
    return total if dims else 0


def _device_mode():
    """The default device while the model is built: the meta device for its weights, the CPU for
    small tensors, and a device the card has ("cuda", which vLLM 0.5.5's DBRX and DeepSeek-V2 rope
    name outright) taken as unnamed: this CPU has none."""
    import torch
    from torch.overrides import TorchFunctionMode
    from torch.utils._device import _device_constructors

    constructors = _device_constructors()

    class WeightsOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func in constructors:
                device = kwargs.get("device")
                if device is None or _is_accelerator(device):
                    kwargs["device"] = "meta" if _numel(func, args, kwargs) >= LARGE else "cpu"
            elif func is torch.Tensor.to:
                args = args[:1] + tuple(a for a in args[1:] if not _is_accelerator(a))
                if _is_accelerator(kwargs.get("device")):
                    del kwargs["device"]
            elif func is torch.Tensor.cuda:
                return args[0]
            else:
                args, kwargs = _meta_if_mixed(args, kwargs)
            return func(*args, **kwargs)

    return WeightsOnMeta()


def _meta_if_mixed(args, kwargs):
    """A computation of a tensor the mode sent to the meta device with CPU tensors runs on the meta
    device too, and its result gets a shape as the weights do: vLLM's rotary cache of a model with
    millions of positions (Llama 4 Scout's 10M) starts from an arange that large, then multiplies it
    with the small inverse frequencies made on the CPU."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    tensors = [x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
    if not any(t.is_meta for t in tensors) or all(t.is_meta for t in tensors):
        return args, kwargs

    def to_meta(x):
        return x.to("meta") if isinstance(x, torch.Tensor) and not x.is_meta else x

    return tree_map(to_meta, args), tree_map(to_meta, kwargs)


def _construct(config):
    """(model class name, the model) as the engine's DefaultModelLoader constructs it, its weights
    on the meta device."""
    model_config = config.model_config
    try:
        from vllm.model_executor.model_loader.utils import initialize_model  # 0.6.4+: one VllmConfig
    except ImportError:
        initialize_model = None
    with _set_default_dtype(model_config.dtype), _device_mode():
        if initialize_model is not None:
            with _set_current(config):
                model = initialize_model(vllm_config=config, model_config=model_config)
        else:
            from vllm.model_executor.model_loader.loader import _initialize_model  # 0.5.x

            model = _initialize_model(model_config, config.load_config, config.lora_config, config.cache_config, config.scheduler_config)
    return type(model).__name__, model


# What the registry's inspections of model classes raised in this process: vLLM logs it and says
# only "failed to be inspected" (and, its inspection cached, says so again for the next model of
# the architecture); the judgement is of what the last one raised.
_INSPECTION_ERRORS = []


def _inspect(fn):
    try:
        return fn()
    except Exception as exc:
        _INSPECTION_ERRORS.append(exc)
        raise


def _inspect_in_process():
    """vLLM 0.6+ inspects a model class its registry has not seen on this machine in a child
    Python (to keep CUDA out of the engine's own process), which imports vLLM again: seconds per
    architecture. Here there is no CUDA to keep out and the class is built in this process anyway:
    the inspection runs here (its result is cached on disk as vLLM caches it)."""
    try:
        from vllm.model_executor.models import registry
    except ImportError:  # 0.5.x: no inspection
        return
    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = _inspect


def _no_cpu_only_fallback():
    """vLLM 0.11 gives up its V1 engine for V0 where a model has a sliding window and the platform
    is the CPU (its CPU attention lacks windows), and V0 then refuses what V1 serves (prefix caching
    with a window; the CPU platform has no V0 attention at all). The card runs V1: the platform is
    not called the CPU while vLLM decides between them. Elsewhere (0.5.x, 0.12+) there is no such
    choice."""
    try:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.platforms import current_platform
    except ImportError:
        return
    oracle = getattr(EngineArgs, "_is_v1_supported_oracle", None)
    if not callable(oracle) or getattr(oracle, "compat_card", False):
        return

    def _is_v1_supported_oracle(self, model_config):
        current_platform.is_cpu = lambda: False
        try:
            return oracle(self, model_config)
        finally:
            del current_platform.is_cpu  # the class's own again

    _is_v1_supported_oracle.compat_card = True
    EngineArgs._is_v1_supported_oracle = _is_v1_supported_oracle


# ---- the attention backend: the card's, not the CPU build's -------------------------------------

# The modules whose Attention layers pick a backend with `get_attn_backend` (0.5.5 and 0.11: the
# layer; 0.12+: the layer and its MLA variant under model_executor/layers/attention).
ATTENTION_LAYERS = (
    "vllm.attention.layer",
    "vllm.model_executor.layers.attention.attention",
    "vllm.model_executor.layers.attention.mla_attention",
)
# The CPU builds' own backend, the stand-in when the CPU platform refuses to pick one.
CPU_BACKENDS = (
    ("vllm.v1.attention.backends.cpu_attn", "CPUAttentionBackend"),  # 0.12+
    ("vllm.v1.attention.backends.cpu_attn", "TorchSDPABackend"),  # 0.11
    ("vllm.attention.backends.torch_sdpa", "TorchSDPABackend"),  # 0.5.5
)
# What the CPU build's attention refused while the model was built (reset for each model).
_ATTENTION_NOTES = []
_TOLERANT = {}


def _note_attention(what, exc):
    where = _raising_frame(exc)
    place = f" ({where[1]}:{where[2]})" if where else ""
    text = f"{what}: {type(exc).__name__}: {str(exc).strip()[:300]}{place}"
    if text not in _ATTENTION_NOTES:
        _ATTENTION_NOTES.append(text)


def _cpu_backend():
    import importlib

    for module, name in CPU_BACKENDS:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    raise Unanswerable("no attention backend of the CPU build to stand in for the card's")


def _tolerant_backend(backend):
    """`backend` whose implementation never refuses at construction: a refusal is noted instead.
    The attention kernels are the card's (H1 judges their head sizes against the card's profile);
    the CPU build's refusals (soft-capping, MLA or sliding windows on 0.11's CPU) say nothing of
    them, and an implementation does nothing while the model is built but keep its settings."""
    if backend in _TOLERANT:
        return _TOLERANT[backend]
    real_impl = backend.get_impl_cls()

    def __init__(self, *args, **kwargs):
        try:
            real_impl.__init__(self, *args, **kwargs)
        except Exception as exc:
            _note_attention(f"the CPU build's {real_impl.__name__}", exc)

    impl = type(real_impl.__name__, (real_impl,), {"__init__": __init__, "__module__": real_impl.__module__})
    tolerant = type(backend.__name__, (backend,), {"get_impl_cls": staticmethod(lambda: impl), "__module__": backend.__module__})
    _TOLERANT[backend] = _TOLERANT[tolerant] = tolerant
    return tolerant


def _tolerant_selector(real):
    def get_attn_backend(*args, **kwargs):
        try:
            backend = real(*args, **kwargs)
        except Exception as exc:  # the CPU platform picks none (MLA, V0 after a CPU-only fallback)
            _note_attention("the CPU build picks no attention backend", exc)
            backend = _cpu_backend()
        return _tolerant_backend(backend)

    get_attn_backend.compat_tolerant = True
    return get_attn_backend


def _install_tolerant_attention():
    """Every Attention layer of the engine picks its backend through _tolerant_selector."""
    import importlib

    for name in ATTENTION_LAYERS:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        real = getattr(module, "get_attn_backend", None)
        if callable(real) and not getattr(real, "compat_tolerant", False):
            module.get_attn_backend = _tolerant_selector(real)


# ---- the image's plugin ----------------------------------------------------------------------


def _model_registry():
    """The dict of the engine's registry that registrations go to (restored after each model)."""
    try:
        from vllm.model_executor.models.registry import ModelRegistry  # 0.6+

        return ModelRegistry.models
    except ImportError:
        import vllm.model_executor.models as models  # 0.5.x: out-of-tree models in their own dict

        return models._OOT_MODELS


def _plugin():
    """The image's plugin modules, as the engine imports them (the plugin directory on sys.path:
    their top-level names): (compat_configs, compat_plugin)."""
    if PLUGIN_DIR not in sys.path:
        sys.path.insert(0, PLUGIN_DIR)
    import compat_configs
    import compat_plugin

    return compat_configs, compat_plugin


@contextlib.contextmanager
def _process_state(env, register_plugin):
    """A process started with `env` (the repairs' variables: PYTHONPATH entries go on sys.path) and,
    where the repairs ask for it, the image's plugin registered as sitecustomize.py and vLLM's entry
    point register it; os.environ, sys.path and the engine's model registry as they were after
    the model, so that no model's registrations reach the next one."""
    saved_environ, saved_path = dict(os.environ), list(sys.path)
    registry = _model_registry()
    saved_registry = dict(registry)
    plugin, saved_registered = None, set()
    for key, value in env.items():
        if key == "PYTHONPATH":
            for entry in reversed([p for p in value.split(os.pathsep) if p]):
                if entry not in sys.path:
                    sys.path.insert(0, entry)
        else:
            os.environ[key] = value
    try:
        if register_plugin:
            try:
                configs, plugin = _plugin()
                saved_registered = set(plugin._REGISTERED)
                configs.register(configs.parse(env.get(configs.ENV, "")))
                plugin.register()  # reads os.environ, which holds `env` now
            except Exception as exc:
                raise Unanswerable(f"the image's plugin could not be registered here ({type(exc).__name__}: {exc})") from exc
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_environ)
        sys.path[:] = saved_path
        registry.clear()
        registry.update(saved_registry)
        if plugin is not None:
            plugin._REGISTERED.clear()
            plugin._REGISTERED.update(saved_registered)


# ---- who refused ------------------------------------------------------------------------------


def _owner(filename):
    """("vllm", path under the vllm package) or ("plugin", path under the plugin dir), else None."""
    path = os.path.abspath(filename)
    for owner, root in (("plugin", PLUGIN_DIR), ("vllm", _vllm_dir())):
        if root and path.startswith(root + os.sep):
            return owner, path[len(root) + 1 :].replace(os.sep, "/")
    return None


def _vllm_dir():
    module = sys.modules.get("vllm")
    path = getattr(module, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else ""


def _raising_frame(exc):
    """The innermost frame of the engine's or the plugin's code the exception passed through
    (torch's and the standard library's frames below it skipped): (owner, relative path, line,
    function), or None when none did."""
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        owner = _owner(frame.f_code.co_filename)
        if owner is not None:
            found = (owner[0], owner[1], line, frame.f_code.co_name, frame.f_code.co_filename)
    return found


def _is_refusal(where):
    if where is None:
        return False
    owner, path, function = where[0], where[1], where[3]
    if function == "<module>":
        return False  # raised while a module was imported: whatever the model, not its configuration
    if owner == "plugin":
        return path.startswith(PLUGIN_CODE)
    if function in CONFIG_REFUSALS:
        return True
    return path.startswith(MODEL_CODE) and not path.startswith(PLATFORM_CODE)


def _unwrap(exc):
    """The exception a pydantic validator raised (vLLM 0.11+'s configs are pydantic dataclasses,
    which wrap what their __post_init__ raises in a ValidationError): the engine's own, with its
    traceback; `exc` itself for anything else."""
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ != "ValidationError" or not callable(errors):
        return exc
    try:
        for error in errors():
            inner = (error.get("ctx") or {}).get("error")
            if isinstance(inner, BaseException):
                return inner
    except Exception:  # another library's ValidationError: kept as it is
        pass
    return exc


# Frames of code that is the platform's, not the model's: a failure that passed through one is the
# CPU build's or this machine's (no CUDA driver), whatever model code called it.
PLATFORM_FRAMES = ("/torch/cuda/", "/triton/", "/vllm/platforms/", "/vllm/_custom_ops.py", "/vllm/_ipex_ops.py")


def _through_platform(exc):
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename).replace(os.sep, "/")
        if any(part in path for part in PLATFORM_FRAMES):
            return True
    return False


def _missing_module(exc):
    """A module the engine's code imports that this Python lacks (vLLM 0.5.5's SigLIP imports
    vllm_flash_attn, which its CPU build has not): the card's image may have it."""
    return isinstance(exc, ImportError)


def _meta_only(exc):
    """An error of the meta device itself (model code that computes on a tensor at construction):
    the engine, on a real device, would not raise it."""
    text = str(exc)
    return "meta" in text and isinstance(exc, (NotImplementedError, RuntimeError))


# vLLM 0.12+ picks a kernel for a quantized layer or MoE among backends, and when none fits it lists
# each backend with its reason ("backend: CPU, reason: ...", "CPUFp8BlockScaledMMKernel requires AMX
# tile support ..."): the CPU build's own entries say what this machine lacks; the rest are kernels
# of other devices, the card's among them.
CPU_KERNEL_REASONS = (
    re.compile(r"backend: (CPU\w*), reason: ([^;]+?)\s*(?:;|$)"),
    re.compile(r"\b(CPU\w*Kernel) (requires [^\n]+?)\.*\s*(?:\n|$)"),
)


def _cpu_kernels(message):
    """What the CPU build's kernels said of themselves in an engine's no-kernel-fits message, one
    line ("" when the message names none)."""
    said = []
    for pattern in CPU_KERNEL_REASONS:
        for name, reason in pattern.findall(message):
            text = f"{name}: {reason.strip().rstrip('.')}"
            if text not in said:
                said.append(text)
    if not said:
        return ""
    try:
        import torch

        amx = torch.cpu._is_amx_tile_supported()
    except Exception:  # another torch: the machine's fact is left out, the engine's words stay
        amx = None
    machine = " (this machine's CPU has no AMX tiles)" if amx is False else ""
    return "; ".join(said) + machine


def _error(exc, where):
    message = str(exc).strip() or NO_MESSAGE
    error = {"type": type(exc).__name__, "message": message[:MESSAGE_CHARS]}
    if where is not None:
        error["file"] = ("vllm/" if where[0] == "vllm" else "vllm_plugin/") + where[1]
        error["line"], error["function"] = where[2], where[3]
        code = linecache.getline(where[4], where[2]).strip()
        if code:
            error["code"] = code[:200]
    return error


def _said(error):
    """The error as one line: an assert without a message says its own source line."""
    place = f" ({error['file']}:{error['line']}, in {error['function']})" if "file" in error else ""
    message = error["message"]
    if message == NO_MESSAGE and error.get("code"):
        message = error["code"]
    return f"{error['type']}: {message}{place}"


# ---- the request ------------------------------------------------------------------------------


# What vLLM's import pulls in that building a model class never runs, kept out of this process's
# first import of vLLM: scikit-learn (transformers' assisted decoding imports it when installed)
# and the offline entry point vllm.LLM with all it imports (the OpenAI API's types, chat
# templates, guided decoding), which vLLM 0.5.5's package __init__ imports eagerly (0.6.4+ import
# it lazily). About a second of the 4.5 s that import takes on two cores, most of doctor's time
# over a folder (make bench: doctor_models_per_s). Both are put back once vLLM is imported: a
# module that asks for them later imports the real ones.
UNUSED_BY_THE_BUILD = ("sklearn",)
OFFLINE_ENTRY_POINT = "vllm.entrypoints.llm"


def _import_engine():
    """Import vLLM and its engine arguments (torch with them) without what the build never runs."""
    import types

    # transformers decides once, at its own import, what is installed: hidden after that, a
    # package it found would fail its import.
    hidden = [name for name in UNUSED_BY_THE_BUILD if name not in sys.modules] if "transformers" not in sys.modules else []
    stub = None
    if OFFLINE_ENTRY_POINT not in sys.modules and "vllm" not in sys.modules:
        stub = types.ModuleType(OFFLINE_ENTRY_POINT)
        stub.LLM = None  # vllm.LLM: the offline entry point, which no model build calls
        sys.modules[OFFLINE_ENTRY_POINT] = stub
    for name in hidden:
        sys.modules[name] = None  # what importlib answers for a package that is not installed
    try:
        import vllm
        from vllm.engine.arg_utils import AsyncEngineArgs  # noqa: F401
    finally:
        for name in hidden:
            if sys.modules.get(name, False) is None:
                del sys.modules[name]
        if stub is not None and sys.modules.get(OFFLINE_ENTRY_POINT) is stub:
            del sys.modules[OFFLINE_ENTRY_POINT]
            entrypoints = sys.modules.get("vllm.entrypoints")
            if getattr(entrypoints, "llm", None) is stub:
                delattr(entrypoints, "llm")
    return vllm


def warm():
    """The imports the first build pays (vLLM, its engine arguments, torch), made ahead of the
    requests; a failure is left for the build to report (it imports them again and says why)."""
    try:
        _import_engine()
    except Exception:
        pass


def build(request):
    """The answer to one model_build request (see process.py); never raises."""
    started = time.perf_counter()
    try:
        answer = _build(request)
    except Unanswerable as exc:
        answer = {"ok": None, "stage": "harness", "reason": f"cannot tell: {exc}"}
    except Exception as exc:  # the harness's own failure, never the model's
        answer = {
            "ok": None,
            "stage": "harness",
            "reason": f"cannot tell: the model build failed in the harness ({type(exc).__name__}: {exc})",
        }
    answer["seconds"] = round(time.perf_counter() - started, 4)
    return answer


def _build(request):
    try:
        vllm = _import_engine()
    except Exception as exc:
        raise Unanswerable(f"vLLM is not importable by {sys.executable} ({type(exc).__name__}: {exc})") from None
    version = str(getattr(vllm, "__version__", "?"))
    _inspect_in_process()
    _no_cpu_only_fallback()
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    args = [str(a) for a in request.get("args") or []]
    with contextlib.redirect_stdout(sys.stderr), _process_state(env, bool(request.get("register_plugin"))):
        stage = "config"
        try:
            config = _engine_args(str(request["path"]), args).create_engine_config()
            tp = int(config.parallel_config.tensor_parallel_size)
            stage = "harness"
            _init_distributed(config)
            _install_tolerant_attention()
            del _ATTENTION_NOTES[:]
            stage = "model"
            with _tensor_parallel(tp):
                name, model = _construct(config)
            params = sum(p.numel() for p in model.parameters())
        except Unanswerable:
            raise
        except Exception as exc:
            return _judged(exc, stage, version)
    notes = list(_ATTENTION_NOTES)
    aside = f"; not judged here, the card's attention kernels decide: {'; '.join(notes)}" if notes else ""
    return {
        "ok": True,
        "stage": "model",
        "vllm": version,
        "class": name,
        "parameters": int(params),
        "attention_notes": notes,
        "reason": f"vLLM {version} builds {name} on the meta device ({params:,} parameters at tensor-parallel size {tp}){aside}",
    }


def _judged(exc, stage, version):
    exc = _unwrap(exc)
    if "failed to be inspected" in str(exc):
        if not _INSPECTION_ERRORS:  # vLLM's summary of a failure it logged: says nothing here
            return {"stage": stage, "vllm": version, "ok": None, "reason": f"cannot tell: {str(exc)[:MESSAGE_CHARS]}"}
        exc = _INSPECTION_ERRORS[-1]  # what the (last) inspection raised, not vLLM's summary of it
    where = _raising_frame(exc)
    error = _error(exc, where)
    answer = {"stage": stage, "vllm": version, "error": error}
    if _is_refusal(where) and not _meta_only(exc) and not _missing_module(exc) and not _through_platform(exc):
        if where[0] == "plugin":
            who = f"the image's {where[1].split('/')[0]} (on vLLM {version})"
        else:
            who = f"vLLM {version}'s " + ("config check" if stage == "config" else "model code")
        return dict(answer, ok=False, reason=f"{who} refuses this configuration: {_said(error)}")
    if _missing_module(exc):
        why = f"the engine's code imports a module this Python lacks (the card's image may have it): {_said(error)}"
    elif stage == "config":
        why = f"the engine's config could not be built here: {_said(error)}"
    elif stage == "harness":
        why = f"the engine's distributed state could not be made here: {_said(error)}"
    elif _meta_only(exc):
        why = f"the model's code computes on a tensor while it is built, which the meta device cannot: {_said(error)}"
    elif _cpu_kernels(str(exc)):
        # The engine's first sentence names the kind of kernel; the CPU build's own reasons follow
        # (the card's kernels, listed beside them, are not this machine's to judge).
        head = dict(error, message=str(exc).strip().split(". ")[0].split("\n")[0])
        why = f"the CPU build here has no kernel for this, the card runs its own: {_said(head)}; the CPU build's: {_cpu_kernels(str(exc))}"
    else:
        why = f"the model build failed outside the engine's model code, in a part the CPU build here may run differently from the card: {_said(error)}"
    return dict(answer, ok=None, reason=f"cannot tell: {why}")
