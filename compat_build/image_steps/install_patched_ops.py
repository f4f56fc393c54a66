"""L3: copy a card's patched ops into a vendor package and export them from its __init__.

usage: python3 -m compat_build.image_steps.install_patched_ops OPS_DIR PACKAGE.SUBPACKAGE
       (e.g. cards/iluvatar-bi100/patches/ixformer_ops ixformer.functions)

The target is found through this interpreter's import machinery (the image's Python) without
importing it. For each OPS_DIR/*.py except __init__.py: copy it in, and append
`from .<name> import *` to the subpackage's __init__.py only where that line is missing, through
the shared patching helper (backup once, idempotent, compiled before it is written). Each op is reported; any failure
exits non-zero so the image build stops.
"""

import os
import shutil
import sys

from common.engine.patching import PatchError, module_location, patch_file


def find_package_dir(dotted: str) -> str:
    path = module_location(dotted)
    if path is None or not os.path.isfile(os.path.join(path, "__init__.py")):
        raise SystemExit(f"L3: {dotted} is not an installed package for {sys.executable}")
    return path


def install(ops_dir: str, target: str) -> list:
    """Install every op; returns [(name, status)] with status copied/unchanged/failed: reason."""
    init = os.path.join(target, "__init__.py")
    with open(init, encoding="utf-8") as fh:
        init_text = fh.read()
    lines = set(line.strip() for line in init_text.splitlines())
    additions = []
    report = []
    for file in sorted(os.listdir(ops_dir)):
        if not file.endswith(".py") or file == "__init__.py":
            continue
        name = file[:-3]
        src, dst = os.path.join(ops_dir, file), os.path.join(target, file)
        try:
            with open(src, encoding="utf-8") as fh:
                compile(fh.read(), src, "exec")  # a broken op must fail the build, not the model
            same = os.path.isfile(dst) and open(dst, "rb").read() == open(src, "rb").read()
            if not same:
                shutil.copyfile(src, dst)
            line = f"from .{name} import *"
            if line not in lines:
                additions.append(line)
            report.append((name, "unchanged" if same and line in lines else "installed"))
        except (OSError, SyntaxError) as exc:
            report.append((name, f"failed: {exc}"))
    if additions:

        def export(text: str) -> str:
            missing = [line for line in additions if line not in (ln.strip() for ln in text.splitlines())]
            if not missing:
                return text
            return text + ("\n" if text and not text.endswith("\n") else "") + "".join(line + "\n" for line in missing)

        try:
            patch_file(init, export)
        except PatchError as exc:
            report.append(("__init__", f"failed: {exc}"))
    return report


def main(argv: list) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    ops_dir, dotted = argv
    target = find_package_dir(dotted)
    report = install(ops_dir, target)
    if not report:
        print(f"L3: no ops in {ops_dir}", file=sys.stderr)
        return 1
    for name, status in report:
        print(f"L3 {dotted}.{name}: {status}")
    return 1 if any(status.startswith("failed") for _, status in report) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
