"""Run under an engine's Python (vLLM >= 0.10): the bake's cache entry of one architecture against
the entry vLLM writes itself. Payload on stdin: {"architecture": A, "baked": DIR, "own": DIR};
the answer, the last line of stdout: {"written": N, "baked": the bake's entry of A, "own": vLLM's,
"subprocesses": {"own": inspections vLLM ran in a child, "baked": the same in the baked cache}}.

The bake (compat_build/image_steps/bake_modelinfos.py) fills DIR "baked"; then, in the empty
cache "own", vLLM inspects A its own way (its subprocess, then its save), and last resolves A
again in the baked cache, where it must read the entry instead of starting a child.
"""

import json
import os
import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: compat_build


def entry(cache: str, filename: str) -> dict:
    return json.loads((Path(cache) / "modelinfos" / filename).read_text())


def main() -> None:
    payload = json.loads(sys.stdin.read())
    from compat_build.image_steps.bake_modelinfos import bake
    from vllm.model_executor.models import registry

    real = registry._run_in_subprocess  # the bake puts an in-process runner in its place
    written, _ = bake(payload["baked"])
    model = registry.ModelRegistry.models[payload["architecture"]]
    children = {"own": 0, "baked": 0}
    for cache in ("own", "baked"):
        os.environ["VLLM_CACHE_ROOT"] = payload[cache]

        def counted(fn, cache=cache):
            children[cache] += 1
            return real(fn)

        registry._run_in_subprocess = counted
        model.inspect_model_cls()
    filename = model._get_cache_filename()
    answer = {
        "written": written,
        "baked": entry(payload["baked"], filename),
        "own": entry(payload["own"], filename),
        "subprocesses": children,
    }
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
