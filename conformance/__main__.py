"""`python -m conformance run|stale|verify|table|judge|models`: see conformance/README.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

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
    verify = sub.add_parser(
        "verify",
        help="check every committed cell against the ids it keeps, then run cells again and name any that does not come out "
        "as committed (exit 1 if any): a rotating sample by seed, or the cells of the named cases and engines",
    )
    verify.add_argument("--seed", type=int, help="the sample's seed (default: a new one, printed)")
    verify.add_argument("--count", type=int, default=None, help="cells in the sample (default 20)")
    verify.add_argument("--case", action="append", default=[], help="run this case's cells instead of a sample (repeatable)")
    verify.add_argument("--engine", action="append", default=[], help="run this engine generation's cells instead of a sample (repeatable)")
    sub.add_parser("table", help="write README.md's table and common/engine/conformance_cells.json from results.json")
    sub.add_parser("judge", help="bake the cells again and let doctor judge every cell's model anew (no engine runs)")
    models = sub.add_parser("models", help="save the cases' models not yet in the cache (no engine runs)")
    models.add_argument("--saver", action="append", help="only this saver's saves, e.g. v5 (repeatable; the author's must be there first)")
    models.add_argument("--image-changes", action="store_true", help="only the cases of the cells `make test` runs again")
    opts = parser.parse_args(argv)
    if opts.command == "models":
        from .cases import SAVERS
        from .image_changes import image_change_cells
        from .models import CACHE as MODELS_CACHE
        from .models import ensure
        from .report import load

        names = sorted({c["variant"] for c in image_change_cells(load(matrix.RESULTS))}) if opts.image_changes else None
        unknown = set(opts.saver or ()) - set(SAVERS)
        if unknown:
            parser.error(f"no saver {', '.join(sorted(unknown))} (have: {', '.join(SAVERS)})")
        cases, savers = matrix.select_cases(names), opts.saver or list(SAVERS)
        with tempfile.TemporaryFile("w+") as log:
            try:
                ensure(cases, savers, log)
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                log.seek(0)
                print(log.read()[-4000:], f"conformance: saving the models failed: {exc}", sep="\n", file=sys.stderr)
                return 1
        print(
            f"conformance: the models of {len(cases)} cases saved by {', '.join(savers)} are in {MODELS_CACHE / 'models'}", file=sys.stderr
        )
        return 0
    if opts.command == "judge":
        from .report import load

        results = load(matrix.RESULTS)
        judge(results)
        if rescope(results):  # from the traits read again
            judge(results)
        return 0
    if opts.command == "stale":
        from .report import load

        found = matrix.stale(load(matrix.RESULTS))
        for line in found:
            print(line)
        if found:
            print(f"{len(found)} stale cells: `make conformance` runs them again", file=sys.stderr)
        return 1 if found else 0
    if opts.command == "verify":
        return verify_cells(opts)
    if opts.command == "table":
        from .report import load, write_baked, write_readme

        results = load(matrix.RESULTS)
        write_baked(results)
        write_readme(results)
        return 0
    if opts.command == "run":
        results = matrix.run(opts.case, opts.engine, opts.jobs, opts.keep, everything=opts.everything)
        print(f"conformance: {results['last_run']['cells']} cells in {results['last_run']['seconds']} s", file=sys.stderr)
        if rescope(results):
            judge(results)  # doctor's verdicts again, under the scope the cells give C1
    return 0


def verify_cells(opts) -> int:
    """`verify`: every committed cell against its ids, then the chosen cells run again."""
    import secrets

    from . import verify
    from .report import load

    results = load(matrix.RESULTS)
    problems = verify.check_committed(results)
    if opts.case or opts.engine:
        cells = verify.named(results, opts.case, opts.engine)
        print(f"conformance verify: {len(cells)} cells of {', '.join(opts.case + opts.engine)}", file=sys.stderr)
    else:
        seed = opts.seed if opts.seed is not None else secrets.randbelow(2**32)
        cells = verify.sample(results, seed, opts.count or verify.SAMPLE)
        print(f"conformance verify: seed {seed} ({len(cells)} cells; --seed {seed} draws them again)", file=sys.stderr)
    problems += verify.rerun(results, cells, progress=matrix._stderr)
    for line in problems:
        print(line)
    if problems:
        print(f"conformance verify: {len(problems)} cells are not as committed", file=sys.stderr)
        return 1
    print(f"conformance verify: every committed cell holds its ids; the {len(cells)} run again came out as committed", file=sys.stderr)
    return 0


def rescope(results) -> bool:
    """C1's scope written from the cells (common/rules/support/scopes.py); True when it changed."""
    from .report import write_scope

    changed = write_scope(results)
    if changed:
        print("conformance: C1's scope changed with the cells: common/rules/support/scopes.py written", file=sys.stderr)
    return changed


def judge(results) -> None:
    """doctor's verdict on every cell's model again (its processes read the scope as written)."""
    from .report import write_readme

    matrix.judge_all(results, matrix._stderr)
    matrix.RESULTS.write_text(json.dumps(results, indent=1) + "\n")
    write_readme(results)


if __name__ == "__main__":
    sys.exit(main())
