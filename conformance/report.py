"""results.json as the table in conformance/README.md, and the totals per engine."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Tuple

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
    for cell in sorted(cells, key=lambda c: c["saved_by"], reverse=True):
        text = MARK.get(cell["result"], cell["result"])
        if cell.get("code"):
            text += f" ({cell['code']})"
        repairs = [r for r in cell.get("repairs", []) if r]
        if cell["result"] == "exact" and repairs:
            text += " with " + "+".join(repairs)
        parts.append(f"{cell['saved_by']}: {text}")
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
    lines += ["", "| card | vLLM | architectures | exact for some saver | " + " | ".join(RESULTS_ORDER) + " |", "|---|---|---|---|" + "---|" * len(RESULTS_ORDER)]
    for card, vllm in columns:
        t = totals(results).get(card)
        if t:
            lines.append(f"| {card} | {vllm} | {t['architectures']} | {t['architectures_exact']} | " + " | ".join(str(t.get(r, 0)) for r in RESULTS_ORDER) + " |")
    last = results.get("last_run")
    if last:
        lines += ["", f"Last full or partial run: {last['cells']} cells in {last['seconds']} s ({last['jobs']} engine workers side by side)."]
    return "\n".join(lines)


def write_readme(results: Dict[str, Any]) -> None:
    text = README.read_text()
    block = f"{BEGIN}\n{table(results)}\n{END}"
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    README.write_text(pattern.sub(lambda _: block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n")


def load(path: Path) -> Dict[str, Any]:
    return json.loads(path.read_text())
