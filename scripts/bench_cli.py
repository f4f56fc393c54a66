"""What the bench scripts (make bench, make bench-images) share: a command line whose --help is led by
the script's docstring, and the figures printed one `name: value` a line, the form docs/ quotes and
a reader greps. Imported by those scripts (their folder is on sys.path when they run)."""

import argparse
import sys
from typing import Callable, Mapping, Optional

Figures = Mapping[str, object]


def parser(doc: str) -> argparse.ArgumentParser:
    """The script's options; --help opens with the first paragraph of its docstring `doc`."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0])


def report(figures: Figures) -> None:
    """Each figure on a line of its own, flushed: a long bench shows each as soon as it is measured."""
    for name, value in figures.items():
        print(f"{name}: {value}", flush=True)


def skipped(group: str, why: str, figures: Optional[Figures]) -> Figures:
    """`figures`, or where a group could not be measured (None) one line `GROUP_*: skipped (WHY)`,
    so that a missing venv shows in the output instead of a figure silently missing."""
    return {f"{group}_*": f"skipped ({why})"} if figures is None else figures


def run(main: Callable[[], Figures]) -> None:
    """A bench script's entry: its figures printed, then exit 0 (a failed measurement raises)."""
    report(main())
    sys.exit(0)
