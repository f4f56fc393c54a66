"""`python -m conformance run|table|check`: see conformance/README.md."""

from __future__ import annotations

import argparse
import sys

from . import matrix


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run cells (every one by default) and merge them into results.json")
    run.add_argument("--case", action="append", help="only this case (repeatable)")
    run.add_argument("--engine", action="append", help="only this engine generation's cells, e.g. 0.5.5 (repeatable)")
    run.add_argument("--jobs", type=int, default=2, help="engine workers side by side (default 2)")
    run.add_argument("--keep", action="store_true", help="keep the cells' logs and work dirs")
    opts = parser.parse_args(argv)
    if opts.command == "run":
        results = matrix.run(opts.case, opts.engine, opts.jobs, opts.keep)
        print(f"conformance: {results['last_run']['cells']} cells in {results['last_run']['seconds']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
