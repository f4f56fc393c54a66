"""What `make test`'s set-up cost, step by step (scripts/timed.sh writes one line per step to the
file COMPAT_SETUP_TIMES names: step, start, end, exit status), said in the run's last lines.

Steps run side by side (`make -j4`), so their seconds add up to more than the set-up took: the
wall time is from the first step's start to the last one's end. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Tuple

Step = Tuple[str, float, float, int]


def read(path: Optional[str]) -> List[Step]:
    """The steps recorded in `path`, in the order they started ([] without a file)."""
    if not path or not Path(path).is_file():
        return []
    steps: List[Step] = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        try:
            steps.append((fields[0], float(fields[1]), float(fields[2]), int(fields[3])))
        except (IndexError, ValueError):
            continue  # a line a killed step left half-written
    return sorted(steps, key=lambda s: s[1])


def summary(steps: List[Step]) -> List[str]:
    """The lines the run ends with: each step's seconds (a failed one says so), then the wall time."""
    if not steps:
        return []
    width = max(len(name) for name, *_ in steps)
    lines = ["set-up, each step's seconds (side by side under make -j4):"]
    for name, start, end, status in steps:
        failed = f"  (failed: exit {status})" if status else ""
        lines.append(f"  {name.ljust(width)} {end - start:7.1f} s{failed}")
    wall = max(end for _, _, end, _ in steps) - min(start for _, start, _, _ in steps)
    lines.append(f"set-up: {wall:.0f} s from its first step's start to its last one's end")
    return lines
