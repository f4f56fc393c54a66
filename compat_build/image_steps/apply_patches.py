"""Apply build-time library patches inside an image: `python3 -m compat_build.image_steps.apply_patches L1 [L2 ...]`.

Every patch named here is required: a missing file or anchor prints one line naming the code,
the file and the anchor, and exits 1 so the image build stops at this step. Prints one line per
code otherwise: applied / unchanged for a patch, "check passed" for a build check (L2), which
never changes the file.
"""

from __future__ import annotations

import sys
from typing import List

from common.codes import BUILD, BUILD_CHECK, lookup
from common.engine.patching import PatchError, module_file, patch_file

from ..patches import PATCHES


def main(argv: List[str]) -> int:
    if not argv:
        print("usage: apply_patches.py CODE...   (known: " + ", ".join(sorted(PATCHES)) + ")", file=sys.stderr)
        return 2
    unknown = [code for code in argv if code not in PATCHES]
    if unknown:
        print(f"unknown patch code(s): {', '.join(unknown)} (known: {', '.join(sorted(PATCHES))})", file=sys.stderr)
        return 2
    failed = 0
    for code in argv:
        patch = PATCHES[code]
        try:
            path = module_file(patch.MODULE)
            result = patch_file(path, patch.transform)
        except PatchError as exc:
            print(f"{code} FAILED: {patch.MODULE}: {exc}", file=sys.stderr)
            failed += 1
            continue
        entry = lookup(code, BUILD)
        status = "check passed" if entry is not None and entry.kind == BUILD_CHECK else result.status
        print(f"{code} {status}: {result.path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
