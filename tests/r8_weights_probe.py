"""Run under an engine's Python: the tensors that engine's own weight loader yields for a model.

usage: r8_weights_probe.py MODEL OUT.json

Loads the general plugins the way the engine does at start (vllm.plugins.load_general_plugins),
then iterates DefaultModelLoader._get_weights_iterator on MODEL, whatever its signature in this
vLLM (0.5.x: path, revision, fall_back_to_pt; 0.6+: a Source). Writes {"wrapped": the transforms the
plugin wrapped the iterator with ({"fused_experts": layout, "weight_names": scheme}) or null,
"tensors": {name: [shape, sha256 of the bytes]}}. R8's and R9's end-to-end tests use it.
"""

import hashlib
import inspect
import json
import sys


def main(model: str, out: str) -> None:
    import torch
    from vllm.config import LoadConfig
    from vllm.plugins import load_general_plugins

    try:
        from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
    except ImportError:
        from vllm.model_executor.model_loader.loader import DefaultModelLoader

    load_general_plugins()
    loader = DefaultModelLoader(LoadConfig())
    hook = DefaultModelLoader._get_weights_iterator
    params = list(inspect.signature(hook).parameters)  # the engine's own (the plugin keeps __wrapped__)
    if "source" in params:
        source = DefaultModelLoader.Source(model, None, prefix="", fall_back_to_pt=False, allow_patterns_overrides=None)
        weights = loader._get_weights_iterator(source)
    else:
        weights = loader._get_weights_iterator(model, None, False)
    tensors = {}
    for name, tensor in weights:
        data = tensor.detach().to(torch.float32).contiguous().numpy().tobytes()
        tensors[name] = [list(tensor.shape), hashlib.sha256(data).hexdigest()]
    with open(out, "w", encoding="utf-8") as fh:
        json.dump({"wrapped": getattr(hook, "compat_weights", None), "tensors": tensors}, fh)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
