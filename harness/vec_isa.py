"""torch's answer to "which vector instruction sets can this machine build and load?", asked once
per pre-imported engine instead of once per start.

At a process's first CPU compile (vLLM 0.5.5 compiles Gemma's RMSNorm at its first step, 0.11 and
0.32 compile the model), torch's inductor builds a test library for each instruction set the CPU
reports and loads each in a fresh interpreter that imports torch: 4-5 s of every such start on two
cores, with the same answer each time on the same machine and engine venv. A fork of the
pre-imported engine inherits torch's caches, so the answer is put there once, before the forks.

It is not computed here: the probe also asks torch for CUDA devices, and once a process has asked,
torch marks each child it forks unable to initialise CUDA, so a card's engine that reaches for CUDA
on the CPU build would refuse with "Cannot re-initialize CUDA in forked subprocess" instead of its
own "Found no NVIDIA driver". A fresh interpreter of the same engine venv runs torch's own probe and
prints its answer; this process writes that answer into the caches the probe would have filled,
without running it. Where the caches are not the ones this module knows (another torch), or the
answer read back differs from the probe's, the caches are left empty and each start probes itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import ModuleType
from typing import List, Optional

# What the fresh interpreter runs: torch's own probe, its answer as the instruction sets' names.
PROBE = """
import json
try:
    from torch._inductor import cpu_vec_isa as isa
except ImportError:  # torch < 2.5 keeps it in its code cache
    from torch._inductor import codecache as isa
print(json.dumps([str(i) for i in isa.valid_vec_isa_list()]))
"""
PROBE_TIMEOUT_S = 300


def _module() -> Optional[ModuleType]:
    try:
        from torch._inductor import cpu_vec_isa as module
    except ImportError:
        try:
            from torch._inductor import codecache as module
        except ImportError:
            return None
    needed = ("valid_vec_isa_list", "supported_vec_isa_list", "VecISA")
    return module if all(hasattr(module, name) for name in needed) else None


def probe() -> Optional[List[str]]:
    """torch's answer, from a fresh interpreter of this Python: the names of the usable sets."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=dict(os.environ),
        )
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return answer if isinstance(answer, list) and all(isinstance(a, str) for a in answer) else None


def _clear(module: ModuleType) -> None:
    module.valid_vec_isa_list.cache_clear()
    for cached in (getattr(module.VecISA, "__bool__", None), getattr(module.VecISA, "_VecISA__bool__impl", None)):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()


def _remember(module: ModuleType, isa: object, usable: bool) -> None:
    """Fill the cache of `bool(isa)` with `usable`, as the probe would have."""
    config = module.config.cpp
    if hasattr(module.VecISA, "check_build"):
        # torch >= 2.5: bool(isa) is cached per value of config.cpp.vec_isa_ok, and with it unset
        # (as every start has it) runs check_build: that is the call answered here.
        isa.check_build = lambda code: usable  # type: ignore[attr-defined]
        try:
            bool(isa)
        finally:
            del isa.check_build  # type: ignore[attr-defined]
    else:
        # torch 2.4: bool(isa) is cached per ISA and answers config.cpp.vec_isa_ok where it is set.
        saved = config.vec_isa_ok
        config.vec_isa_ok = usable
        try:
            bool(isa)
        finally:
            config.vec_isa_ok = saved


def answer_once() -> Optional[List[str]]:
    """Put torch's probe answer into this process's caches; the answer, or None where it was left
    to each start."""
    module = _module()
    if module is None:
        return None
    answer = probe()
    if answer is None:
        return None
    # Only the sets the CPU reports are probed; any other stays as torch would leave it.
    reported = module.x86_isa_checker() if hasattr(module, "x86_isa_checker") else []
    for isa in module.supported_vec_isa_list:
        if str(isa) in answer or str(isa) in reported:
            _remember(module, isa, str(isa) in answer)
    if [str(i) for i in module.valid_vec_isa_list()] != answer:
        _clear(module)
        return None
    return answer
