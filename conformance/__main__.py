"""`python -m conformance run|table|check`: see conformance/README.md."""

from __future__ import annotations

import argparse
import json
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
    run.add_argument(
        "--all", action="store_true", dest="everything", help="every cell, not only those not yet run or whose code changed (the default)"
    )
    sub.add_parser("stale", help="name the committed cells whose fingerprint no longer matches the code (exit 1 if any)")
    sub.add_parser("table", help="write README.md's table and common/conformance_cells.json from results.json")
    sub.add_parser("judge", help="bake the cells again and let doctor judge every cell's model anew (no engine runs)")
    opts = parser.parse_args(argv)
    if opts.command == "judge":
        from .report import load, scope_note, write_readme

        results = load(matrix.RESULTS)
        matrix.judge_all(results, matrix._stderr)
        matrix.RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        write_readme(results)
        note = scope_note(results)
        if note:
            print(note, file=sys.stderr)
            return 1
        return 0
    if opts.command == "stale":
        from .report import load

        found = matrix.stale(load(matrix.RESULTS))
        for line in found:
            print(line)
        if found:
            print(f"{len(found)} stale cells: `make conformance` runs them again", file=sys.stderr)
        return 1 if found else 0
    if opts.command == "table":
        from .report import load, write_baked, write_readme

        results = load(matrix.RESULTS)
        write_baked(results)
        write_readme(results)
        return 0
    if opts.command == "run":
        from .report import scope_note

        results = matrix.run(opts.case, opts.engine, opts.jobs, opts.keep, everything=opts.everything)
        print(f"conformance: {results['last_run']['cells']} cells in {results['last_run']['seconds']} s", file=sys.stderr)
        note = scope_note(results)
        if note:
            print(note, file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
