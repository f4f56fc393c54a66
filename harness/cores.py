"""The cores each pytest worker has: `make test` runs the suite on TEST_WORKERS workers side by
side (pytest-xdist), and each gets its own share of the machine's cores, so that two engines, whose
OpenMP threads spin, never fight for one core (two on one core slow both several times over).

A worker is pinned (its own affinity, which every process it starts inherits) and tells the
engines it starts which cores to bind their threads to (vLLM's CPU backend binds its OpenMP
threads itself: VLLM_CPU_OMP_THREADS_BIND). The image tier's containers get no such variable
(they run with the environment the platform gives, and vLLM 0.5.5 binds through
numa_migrate_pages, which a container without CAP_SYS_NICE is refused): Docker confines each to
its worker's cores instead (--cpuset-cpus, harness/containers.py), and the engines inside
bind to what they are allowed. Unconfined, they bound from core 0 up, onto the other worker's
share, and left their own idle. Standard library only.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Set

# What a worker sets in its own environment, read by every engine start it makes.
PIN_VARIABLES = ("VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS")


def share(index: int, workers: int, cores: List[int]) -> Optional[List[int]]:
    """Worker `index`'s cores of `cores` split in `workers` contiguous shares; None when there are
    fewer cores than workers (then no worker is pinned: they would have to share anyway)."""
    if workers < 2 or len(cores) < workers:
        return None
    size = len(cores) // workers
    return cores[index * size : (index + 1) * size]


def bind_string(cores: List[int]) -> str:
    """VLLM_CPU_OMP_THREADS_BIND's form of a set of cores: "3", "0-7" or "0,2,5"."""
    if cores == list(range(cores[0], cores[-1] + 1)):
        return str(cores[0]) if len(cores) == 1 else f"{cores[0]}-{cores[-1]}"
    return ",".join(map(str, cores))


def cpu_set(listing: str) -> Set[int]:
    """The cores of a kernel CPU list ("0-2,5", /proc/PID/status's Cpus_allowed_list)."""
    cores: Set[int] = set()
    for part in listing.strip().split(","):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def pin_this_worker(worker: str, workers: int) -> Optional[List[int]]:
    """Pin this xdist worker ("gw0", "gw1", ...) to its share; returns the cores, or None."""
    mine = share(int(worker.removeprefix("gw")), workers, sorted(os.sched_getaffinity(0)))
    if mine is None:
        return None
    os.sched_setaffinity(0, mine)
    os.environ.update(pin_env(mine))
    return mine


def rank_binds(bind: str, ranks: int) -> str:
    """VLLM_CPU_OMP_THREADS_BIND for `ranks` tensor-parallel ranks each bound to `bind` (a core
    list, or "all": unbound). vLLM reads one entry per rank, split at "|"; one entry for two ranks
    fails the second rank's start (IndexError), and 0.11's default "auto" wants a NUMA node each."""
    return "|".join([bind] * ranks)


def pin_env(cores: List[int], ranks: int = 1) -> Dict[str, str]:
    """The variables that bind an engine's threads to `cores`, every rank's to all of them."""
    return {"VLLM_CPU_OMP_THREADS_BIND": rank_binds(bind_string(cores), ranks), "OMP_NUM_THREADS": str(len(cores))}


def ranks_env(ranks: int) -> Dict[str, str]:
    """What a start at tensor-parallel size `ranks` adds to this process's environment: every
    rank bound to this worker's cores, or unbound where it is not pinned."""
    bind = os.environ.get("VLLM_CPU_OMP_THREADS_BIND") or "all"
    return {"VLLM_CPU_OMP_THREADS_BIND": rank_binds(bind.split("|")[0], ranks)}
