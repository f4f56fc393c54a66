"""results.json as the table in conformance/README.md, and the totals per engine."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from common.model.config_traits import differences
from common.model.config_values import merge_coverage

from .cases import ENGINES, load_cases

README = Path(__file__).resolve().parent / "README.md"
BEGIN, END = "<!-- results: made by `make conformance`, do not edit -->", "<!-- /results -->"
RESULTS_ORDER = ("exact", "differs", "refused", "crashed", "error")
MARK = {"exact": "exact", "differs": "**DIFFERS**", "refused": "refused", "crashed": "crashed", "error": "error"}


def cards() -> List[Tuple[str, str]]:
    return [(card, engine.vllm) for engine in ENGINES.values() for card in engine.cards]


def totals(results: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Per card: cells by result, and the architectures exact for every saver on it."""
    out: Dict[str, Dict[str, Any]] = {}
    exact_arch: Dict[str, Dict[str, bool]] = {}
    for cell in results["cells"]:
        entry = out.setdefault(cell["card"], {"vllm": cell["vllm"], **{r: 0 for r in RESULTS_ORDER}})
        entry[cell["result"]] = entry.get(cell["result"], 0) + 1
        archs = exact_arch.setdefault(cell["card"], {})
        archs[cell["architecture"]] = archs.get(cell["architecture"], False) or cell["result"] == "exact"
    for card, archs in exact_arch.items():
        out[card]["architectures"] = len(archs)
        out[card]["architectures_exact"] = sum(archs.values())
    return out


def _cell_text(cells: List[Dict[str, Any]]) -> str:
    parts = []
    newest_first = sorted(cells, key=lambda c: c["saved_by"], reverse=True)
    for cell in sorted(newest_first, key=lambda c: int(c.get("tp") or 1)):  # TP 1 first
        text = MARK.get(cell["result"], cell["result"])
        if cell.get("code"):
            text += f" ({cell['code']})"
        repairs = [r for r in cell.get("repairs", []) if r]
        if cell["result"] == "exact" and repairs:
            text += " with " + "+".join(repairs)
        size = int(cell.get("tp") or 1)
        parts.append(f"{cell['saved_by']}" + (f" TP {size}" if size > 1 else "") + f": {text}")
    return "<br>".join(parts) or "-"


def table(results: Dict[str, Any]) -> str:
    columns = cards()
    by_case: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    for cell in results["cells"]:
        by_case.setdefault(cell["variant"], {}).setdefault(cell["card"], []).append(cell)
    head = ["case", "architecture", "configuration"] + [f"{card} (vLLM {vllm})" for card, vllm in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in load_cases():
        row = by_case.get(case["name"], {})
        cells = [_cell_text(row.get(card, [])) for card, _ in columns]
        lines.append(f"| {case['name']} | {case['architecture']} | {case['like']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| card | vLLM | architectures | exact for some saver | " + " | ".join(RESULTS_ORDER) + " |",
        "|---|---|---|---|" + "---|" * len(RESULTS_ORDER),
    ]
    for card, vllm in columns:
        t = totals(results).get(card)
        if t:
            lines.append(
                f"| {card} | {vllm} | {t['architectures']} | {t['architectures_exact']} | "
                + " | ".join(str(t.get(r, 0)) for r in RESULTS_ORDER)
                + " |"
            )
    full = results.get("full_run")
    if full:
        lines += [
            "",
            f"The whole matrix: {full['cells']} cells in {full['seconds'] / 60:.1f} min ({full['jobs']} engine workers side by side, two cores).",
        ]
    return "\n".join(lines)


def write_readme(results: Dict[str, Any]) -> None:
    text = README.read_text()
    block = f"{BEGIN}\n{table(results)}\n{END}"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    README.write_text(pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n")


CELLS = Path(__file__).resolve().parents[1] / "common" / "engine" / "conformance_cells.json"
SCOPES = Path(__file__).resolve().parents[1] / "common" / "rules" / "support" / "scopes.py"
# What doctor needs of a cell (common/engine/conformance_cells.py).
BAKED = ("architecture", "variant", "saved_by", "traits", "result", "code", "cause", "signal", "first_difference", "tp", "sharding")


def saver_key(cell: Dict[str, Any]) -> str:
    return "v5" if str(cell["saved_by"]).split(".")[0] >= "5" else "legacy"


def culprit(cell: Dict[str, Any], exact: List[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The traits of a cell that was not exact which no exact cell of its architecture shares
    all of: the differences from the nearest exact cell, widened until no exact cell has them.
    None when no cell of the architecture is exact, or one has the very same traits: nothing
    then tells what made the difference, and the cell speaks for its own traits only."""
    traits = cell["traits"]
    if not exact:
        return None
    nearest = min(exact, key=lambda e: (len(differences(traits, e["traits"])), e["variant"]))
    keys = set(differences(traits, nearest["traits"]))
    while True:
        matching = [e for e in exact if all(e["traits"].get(k) == traits.get(k) for k in keys)]
        if not matching:
            return {k: traits.get(k) for k in sorted(keys)}
        more = sorted(set(differences(traits, matching[0]["traits"])) - keys)
        if not more:
            return None
        keys.add(more[0])


def culprit_values(values: Dict[str, List[str]], coverage: Dict[str, List[str]]) -> List[str]:
    """The value classes of a cell that was not exact which no exact cell of its architecture
    and saver exercised (`@head_size=size:32`): what made it differ, whatever its traits."""
    return sorted(f"{path}={cls}" for path, classes in values.items() for cls in classes if cls not in coverage.get(path, []))


def baked(results: Dict[str, Any]) -> Dict[str, Any]:
    """common/engine/conformance_cells.json: per card, its engine, every cell doctor can match (a cell
    that was not exact with its culprit traits), and per architecture and saver the value
    classes its exact cells covered."""
    cards_out: Dict[str, Any] = {}
    for cell in results["cells"]:
        entry = cards_out.setdefault(cell["card"], {"vllm": cell["vllm"], "cells": [], "coverage": {}})
        row = {k: cell[k] for k in BAKED if cell.get(k) is not None}
        row["saver"] = saver_key(cell)
        entry["cells"].append(row)
        if cell["result"] == "exact" and cell.get("values"):
            by_saver = entry["coverage"].setdefault(cell["architecture"], {}).setdefault(row["saver"], {})
            merge_coverage(by_saver, cell["values"])
    values_of = {(c["card"], c["variant"], c["saved_by"], int(c.get("tp") or 1)): c.get("values") or {} for c in results["cells"]}
    for card, entry in cards_out.items():
        for row in entry["cells"]:
            if row["result"] == "exact":
                continue
            # Only the cells of the same saver: another saver writes the same model's config
            # otherwise (rope_parameters or rope_scaling), which is no culprit.
            exact = [
                c
                for c in entry["cells"]
                if c["result"] == "exact" and c["architecture"] == row["architecture"] and c["saver"] == row["saver"]
            ]
            found = culprit(row, exact)
            if found:
                row["culprit"] = found
            coverage = entry["coverage"].get(row["architecture"], {}).get(row["saver"], {})
            values = culprit_values(values_of[card, row["variant"], row["saved_by"], int(row.get("tp") or 1)], coverage) if exact else []
            if values:
                row["culprit_values"] = values
            elif not found and any(c["traits"] == row["traits"] for c in exact):
                # An exact cell has its very traits and no value of it is unseen: nothing tells
                # what made the difference, and it speaks for no other model.
                row["unattributed"] = True
    return {"source": "conformance/results.json (make conformance)", "cards": dict(sorted(cards_out.items()))}


def c1_scope(results: Dict[str, Any]) -> Dict[str, List[str]]:
    """What common/rules/support/scopes.py's C1_ARCHITECTURES must hold for these results."""
    from common.rules.c1_conformance import acts_on

    scope: Dict[str, set] = {}
    for cell in baked(results)["cards"].items():
        card, data = cell
        archs = {c["architecture"] for c in data["cells"] if acts_on(c)}
        if archs:
            scope[card] = archs
    return {card: sorted(a) for card, a in sorted(scope.items())}


def write_scope(results: Dict[str, Any], path: Optional[Path] = None) -> bool:
    """Writes C1_ARCHITECTURES in common/rules/support/scopes.py from these results (the rest of the file
    byte for byte as it was); True when the scope changed. No hand pasting: the table is the
    cells' verdict, and their fingerprints leave it out."""
    from compat_build.scopes import rewrite

    return rewrite("C1_ARCHITECTURES", c1_scope(results), path or SCOPES)


def write_baked(results: Dict[str, Any]) -> None:
    CELLS.write_text(json.dumps(baked(results), indent=1, sort_keys=True) + "\n")


def load(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text())
