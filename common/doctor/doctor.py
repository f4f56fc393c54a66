"""doctor: the preflight with verification, as a table a person reads at a glance.

What would fail on this card's stack, what the image repairs (and whether the repair verified),
and what remains. The verdicts promise:
  starts      every check passed and every repair verified with the engine's own transformers
              (its AutoConfig read config.json too), and the engine's own vLLM built its model
              class for it on the meta device (MB, common/doctor/model_build_finding.py): the engine gets past
              the model's metadata to its weights. Exit 0.
  fails       something no repair fixes (an error finding: unknown architecture or model type,
              remote code without --trust-remote-code, an adapter, a quantization method the
              engine lacks, a repair whose verification failed). Exit 1.
  unverified  doctor cannot tell here: a check needs the engine (no engine Python to ask, one
              without the engine's packages, or a profile that lacks the fact). Never a guessed
              "starts". Exit 2.
Usage errors exit 2 too. doctor leaves nothing behind (its work dir is removed unless kept).
Each verdict names the Python that answered its checks (common/engine/engines.py: the variable, the
image's own, or the checkout's engine venv). Many models at once: common/doctor/doctor_many.py.
"""

from __future__ import annotations

import json
import os

from ..plan import Plan
from ..start.preflight import build_plan

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

STATE = {True: "repaired", False: "NOT repaired (verification failed)", None: "NOT repaired (could not verify)"}


def examine(model_dir: str, card: str, vllm_args: Sequence[str], env: Mapping[str, str], keep_work_dir: bool = False) -> Dict[str, Any]:
    """The preflight contract plus `verdict` ("starts" / "fails" / "unverified") and the codes
    that decide it."""
    plan = Plan(card=card, model_dir=os.path.abspath(model_dir))
    try:
        build_plan(model_dir, card, vllm_args, env, verify=True, plan=plan, ask_engine_config=True)
        from .model_build_finding import check as build_model  # the engine's model class, built on the meta device

        build_model([plan], env)
    except Exception as exc:  # a bug must still give the user an answer
        plan.add_finding("INTERNAL", "error", f"preflight failed: {type(exc).__name__}: {exc}")
    finally:
        if not keep_work_dir:
            remove_work_dir(plan)
    return judge(plan.to_json())


def judge(data: Dict[str, Any]) -> Dict[str, Any]:
    """`data` (a plan's JSON) with its verdict and the codes that decide it."""
    from ..engine.conformance_cells import tensor_parallel_size
    from ..engine.vllm_args import UserArgs

    failing = sorted({f["code"] for f in data["findings"] if f["severity"] == "error"})
    unverified = sorted(
        {r["code"] for r in data["repairs"] if r["verified"] is None}
        | {f["code"] for f in data["findings"] if f["severity"] == "unverified"}
    )
    data["verdict"] = "fails" if failing else "unverified" if unverified else "starts"
    data["failing"] = failing
    data["unverified"] = unverified
    data["tokens_tp"] = tensor_parallel_size(UserArgs(data.get("user_args") or []))
    data["tokens"], data["tokens_cell"], data["tokens_open"] = tokens_of(data)
    # The memory layer (rule KV, doctor only): weights and one request's KV cache on the card.
    facts = data.get("facts") or {}
    data["memory"] = facts.get("memory")
    data["facts"] = {k: v for k, v in facts.items() if k != "memory"}
    smallest = (data["memory"] or {}).get("smallest_tp")
    if isinstance(smallest, int) and smallest != data["tokens_tp"]:
        # The platform will have to start it there: say whether its tokens are proven there too.
        tokens, cell, open_list = tokens_of(data, smallest)
        data["tokens_at_smallest_tp"] = {"tp": smallest, "tokens": tokens, "cell": cell, "open": open_list}
    return data


def tokens_of(data: Dict[str, Any], tp: Optional[int] = None) -> Tuple[str, Optional[str], List[str]]:
    """Whether the conformance matrix proved the model's greedy tokens on the card ("proven",
    "differs", "unproven") at the platform's tensor-parallel size (or `tp`), the cell that says
    so, and what no cell covered (deny by default: common/engine/conformance_cells.py)."""
    from ..engine.conformance_cells import judge_start
    from ..engine.vllm_args import UserArgs
    from ..model.modeldir import ModelDir

    try:
        model = ModelDir(data["model_dir"])
        config = model.json_object("config.json")
        user = UserArgs(data.get("user_args") or [])
        quantize = quantize_files(model)
        tokens, cell, open_list = judge_start(data["card"], config, user, quantize, tp)
    except Exception as exc:  # noqa: B902 - an unreadable model has no cell: unproven, said by the other findings
        return "unproven", None, [f"the configuration could not be placed ({type(exc).__name__})"]
    return tokens, cell_name(cell), open_list


def cell_name(cell: Optional[Dict[str, Any]]) -> Optional[str]:
    """How doctor names a conformance cell: its case and saver, and its size above TP 1."""
    if not cell:
        return None
    size = int(cell.get("tp") or 1)
    return f"{cell['variant']} ({cell['saved_by']}" + (f", TP {size})" if size > 1 else ")")


def quantize_files(model: Any) -> Optional[Dict[str, Any]]:
    """The quantization a checkpoint declares beside config.json: AutoGPTQ's quantize_config.json
    (read as GPTQ unless it names its method) or ModelOpt's hf_quant_config.json."""
    if model.has("quantize_config.json"):
        found = model.json_object("quantize_config.json")
        return found if found else {"quant_method": "unreadable quantize_config.json"}
    if model.has("hf_quant_config.json"):
        return {"quant_method": "modelopt"}
    return None


def remove_work_dir(plan: Plan) -> None:
    """A dry run leaves nothing behind: the run's own fresh work dir goes (never the model's)."""
    import shutil

    if plan.work_dir and os.path.isdir(plan.work_dir):
        shutil.rmtree(plan.work_dir, ignore_errors=True)


def table(data: Dict[str, Any]) -> str:
    rows: List[List[str]] = []
    for r in data["repairs"]:
        rows.append([r["code"], r["title"], r["detail"], STATE[r["verified"]]])
    for f in data["findings"]:
        state = {"error": "FAILS", "warning": "warning", "info": "note", "unverified": "unverified"}.get(f["severity"], f["severity"])
        rows.append([f["code"], f["message"], "-", state])
    if not rows:
        rows.append(["-", "nothing on this card's stack would fail", "-", "clean"])
    header = ["code", "on this card's stack", "what the image does", "result"]
    lines = [f"doctor: {data['model_dir']} on {data['card']}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    lines.append("")
    if data.get("engine_python"):
        lines.append(f"checked with: {_python_text(data['engine_python'])}")
    if data.get("tokens"):
        cell = (
            f" (conformance cell {data['tokens_cell']})" if data.get("tokens_cell") else " (no conformance cell covers this configuration)"
        )
        at = f" at TP {data['tokens_tp']}" if data.get("tokens_tp", 1) > 1 else ""
        lines.append(f"tokens: {data['tokens']}{at}{cell}")
        if data.get("tokens_open"):
            lines.append("  not covered by any exact cell: " + "; ".join(data["tokens_open"]))
        smallest = data.get("tokens_at_smallest_tp")
        if smallest:
            where = f" (conformance cell {smallest['cell']})" if smallest.get("cell") else ""
            lines.append(f"tokens at TP {smallest['tp']}, the smallest size that holds it: {smallest['tokens']}{where}")
            if smallest.get("open"):
                lines.append("  not covered by any exact cell: " + "; ".join(smallest["open"]))
    if (data.get("memory") or {}).get("fits") is not None:
        from ..memory.memory_fit import summary as memory_summary

        lines.append(f"memory: {memory_summary(data['memory'])}")
    if data["verdict"] == "starts":
        extra = " ".join(data["args"])
        lines.append(f"verdict: the {data['card']} image will start this model" + (f" (adding: {extra})" if extra else ""))
    elif data["verdict"] == "unverified":
        lines.append(
            f"verdict: unknown: {', '.join(data['unverified'])} could not be verified here; set "
            "COMPAT_ENGINE_PYTHON to a Python with the card's engine (inside the image it is its own; "
            "in a checkout, `make envs` builds the engine venvs doctor finds by itself)"
        )
    else:
        lines.append(f"verdict: this model will fail on {data['card']} even with the image's repairs ({', '.join(data['failing'])})")
        lines += _fixes(data["failing"])
    return "\n".join(lines) + "\n"


def _fixes(codes: List[str]) -> List[str]:
    """What to do for each failing code, from the registry (`explain CODE` has the whole page)."""
    from ..codes import lookup

    lines = []
    for code in codes:
        entry = lookup(code)
        if entry is not None:
            lines.append(f"  {code}: {entry.fix}  (python3 -m common explain {code})")
    return lines


def _python_text(engine: Dict[str, Any]) -> str:
    from ..engine.engines import describe

    return describe(engine)


def recommend(results: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """The variant that starts the model with the fewest repairs (the card's default first on a
    tie, then by name); None when none starts."""
    starting = [name for name, data in results.items() if data["verdict"] == "starts"]
    if not starting:
        return None
    return min(starting, key=lambda n: (len([r for r in results[n]["repairs"] if r["verified"]]), "@" in n, n))


def summary(results: Dict[str, Dict[str, Any]], recommended: Optional[str]) -> str:
    lines = [
        "| engine variant | vLLM | verdict | repairs | failing / unverified | tokens | checked with |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, data in results.items():
        repairs = ", ".join(r["code"] for r in data["repairs"] if r["verified"]) or "-"
        open_codes = ", ".join(data["failing"] + data["unverified"]) or "-"
        mark = " (recommended)" if name == recommended else ""
        python = _python_text(data["engine_python"]) if data.get("engine_python") else "-"
        tokens = data.get("tokens") or "-"
        if data.get("tokens_cell"):
            tokens += f" ({data['tokens_cell']})"
        lines.append(
            f"| {name}{mark} | {data.get('vllm_version', '?')} | {data['verdict']} | {repairs} | {open_codes} | "
            f"{tokens.replace('|', '/')} | {python.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


def run(model_dir: str, card: str, vllm_args: Sequence[str], env: Mapping[str, str], as_json: bool, keep_work_dir: bool = False) -> int:
    """Every engine variant of `card` (only the one named, for `card@variant`), each verified with
    its own engine's Python (common/engine/engines.py); the answer is the recommended variant's, or the
    card's default one when none starts."""
    from ..engine.engines import resolve
    from ..engine.profile import load_profile, variants_of

    names = variants_of(card)
    results: Dict[str, Dict[str, Any]] = {}
    for name in names:
        profile = load_profile(name)
        engine = resolve(name, env, asked=name == names[0])
        results[name] = examine(model_dir, name, vllm_args, engine.env(env), keep_work_dir)
        results[name]["vllm_version"] = profile.vllm_version
        results[name]["engine_python"] = engine.to_json()
    recommended = recommend(results)
    data = dict(results[recommended or names[0]])
    if len(names) > 1:
        # Each variant's own layers of the promise: its tokens are judged against its own engine's cells.
        keys = (
            "verdict",
            "failing",
            "unverified",
            "args",
            "vllm_version",
            "engine_python",
            "tokens",
            "tokens_tp",
            "tokens_cell",
            "tokens_open",
        )
        data["variants"] = {n: {k: d[k] for k in keys} for n, d in results.items()}
        data["recommended"] = recommended
    if as_json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        print(table(data), end="")
        if len(names) > 1:
            print("\n" + summary(results, recommended), end="")
            if recommended and recommended != names[0]:
                print(f"recommended: {recommended} (the {names[0]} engine: {results[names[0]]['verdict']})")
    return {"starts": 0, "fails": 1}.get(data["verdict"], 2)
