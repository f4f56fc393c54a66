"""doctor: the preflight with verification, as a table a person reads at a glance.

What would fail on this card's stack, what the image repairs (and whether the repair verified),
and what remains. Exit 0: the image will start the model; 1: it will fail even with repairs
(an error-level finding remains); 2: usage errors, and a verification that could not run here
(no engine transformers at COMPAT_ENGINE_PYTHON): then doctor cannot tell, and says so.
"""

from __future__ import annotations

import json
import os

from .plan import Plan
from .preflight import build_plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Sequence

STATE = {True: "repaired", False: "NOT repaired (verification failed)", None: "NOT repaired (could not verify)"}


def examine(model_dir: str, card: str, vllm_args: Sequence[str], env: Mapping[str, str]) -> Dict[str, Any]:
    """The preflight contract plus `verdict` ("starts" / "fails") and the codes that fail."""
    plan = Plan(card=card, model_dir=os.path.abspath(model_dir))
    try:
        build_plan(model_dir, card, vllm_args, env, verify=True, plan=plan)
    except Exception as exc:  # a bug must still give the user an answer
        plan.add_finding("INTERNAL", "error", f"preflight failed: {type(exc).__name__}: {exc}")
    data = plan.to_json()
    failing = sorted({f["code"] for f in data["findings"] if f["severity"] == "error"})
    unverified = sorted({r["code"] for r in data["repairs"] if r["verified"] is None})
    data["verdict"] = "fails" if failing else "unverified" if unverified else "starts"
    data["failing"] = failing
    data["unverified"] = unverified
    return data


def table(data: Dict[str, Any]) -> str:
    rows: List[List[str]] = []
    for r in data["repairs"]:
        rows.append([r["code"], r["title"], r["detail"], STATE[r["verified"]]])
    for f in data["findings"]:
        state = {"error": "FAILS", "warning": "warning", "info": "note"}.get(f["severity"], f["severity"])
        rows.append([f["code"], f["message"], "-", state])
    if not rows:
        rows.append(["-", "nothing on this card's stack would fail", "-", "clean"])
    header = ["code", "on this card's stack", "what the image does", "result"]
    lines = [f"doctor: {data['model_dir']} on {data['card']}", "",
             "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    lines.append("")
    if data["verdict"] == "starts":
        extra = " ".join(data["args"])
        lines.append(f"verdict: the {data['card']} image will start this model" + (f" (adding: {extra})" if extra else ""))
    elif data["verdict"] == "unverified":
        lines.append(f"verdict: unknown: {', '.join(data['unverified'])} could not be verified here; set "
                     "COMPAT_ENGINE_PYTHON to a Python with the card's transformers (inside the image it is its own)")
    else:
        lines.append(f"verdict: this model will fail on {data['card']} even with the image's repairs "
                     f"({', '.join(data['failing'])})")
    return "\n".join(lines) + "\n"


def run(model_dir: str, card: str, vllm_args: Sequence[str], env: Mapping[str, str], as_json: bool) -> int:
    data = examine(model_dir, card, vllm_args, env)
    print(json.dumps(data, indent=2, ensure_ascii=False) if as_json else table(data), end="" if not as_json else "\n")
    return {"starts": 0, "fails": 1}.get(data["verdict"], 2)
