"""L3: copy a card's patched ops into a vendor package and export them from its __init__.

usage: install_patched_ops.py OPS_DIR PACKAGE.SUBPACKAGE   (e.g. cards/iluvatar-bi100/patched_ops ixformer.functions)

The target is found through this interpreter's import machinery (the image's Python) without
importing it. For each OPS_DIR/*.py except __init__.py: copy it in, and append
`from .<name> import *` to the subpackage's __init__.py only where that line is missing. The
__init__.py is backed up once (.orig) before its first change. Each op is reported; any failure
exits non-zero so the image build stops.
"""

import importlib.util
import os
import shutil
import sys


def find_package_dir(dotted: str) -> str:
    top, *rest = dotted.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"L3: package {top!r} is not installed for {sys.executable}")
    path = os.path.join(list(spec.submodule_search_locations)[0], *rest)
    if not os.path.isfile(os.path.join(path, "__init__.py")):
        raise SystemExit(f"L3: {dotted} has no __init__.py at {path}")
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
        if not os.path.exists(init + ".orig"):
            shutil.copyfile(init, init + ".orig")
        with open(init, "a", encoding="utf-8") as fh:
            if init_text and not init_text.endswith("\n"):
                fh.write("\n")
            fh.write("".join(line + "\n" for line in additions))
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
