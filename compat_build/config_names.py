"""The config names an engine's model code reads that a saved config does not carry, found by the
engine itself: common/engine/config_names.json, which R13 states for the engine.

vLLM 0.11's Gemma 2 reads `config.hidden_act`, a key only Google's own config.json files carry:
neither the engine's transformers (4.57) nor the author's (5) writes it or answers to it, so the
engine cannot build a Gemma 2 either of them saved. Such names are not guessed here. For every
architecture the engine's registry holds that transformers has a class of, its config class's
defaults are saved by the author's transformers 5 and by the engine's own transformers (the two
savers of real checkpoints), and the engine builds its model class from each on the meta device,
as doctor's MB check does (common/engine_checks/model_build.py): each `'XConfig' object has no attribute
'NAME'` its model code raises is a name found; the build is repeated with the names found so far
stated, until it builds or stops on something else.

What the config carries instead is read from the sources where they tell: the author's config
class answers to NAME through its attribute_map, or takes NAME as the old name of one of its keys
(LFM2's `self.intermediate_size = kwargs.pop("block_ff_dim", ...)`); else CARRIERS below, read
from the author's modeling code (what it computes with where the engine reads NAME). A name found
with neither fails the run: R13 could not state it.

The sources are the venvs' (the registry and the config classes of the engine venv's vLLM and
transformers, the author venv's transformers); a few minutes on two cores, most of it the builds.

usage: python -m compat_build.config_names [--check]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "common" / "engine" / "config_names.json"
AUTHOR_VENV = ".venv-author"
# The engine generations examined, by the venv of each. vLLM 0.5.5 serves every Gemma 2 by R10's
# backport and 0.32 reads configs with transformers 5: neither is examined yet.
ENGINES = {"0.11.0": ".venv-engine"}
# What the author's modeling code computes with where the engine reads a name no source maps:
# (model_type, name) -> {"key": K} (its value of key K), {"value": V}, {"quotient": [A, B]}.
CARRIERS: Dict[Tuple[str, str], Dict[str, Any]] = {
    # modeling_gemma2.py: Gemma2MLP's act_fn = ACT2FN[config.hidden_activation]
    ("gemma2", "hidden_act"): {"key": "hidden_activation"},
    # modeling_deepseek_v2.py: DeepseekV2Moe on every layer from first_k_dense_replace on
    ("deepseek_v2", "moe_layer_freq"): {"value": 1},
    # modeling_deepseek_v2.py: DeepseekV2TopkRouter scores by router_logits.softmax(...)
    ("deepseek_v2", "scoring_func"): {"value": "softmax"},
    # modeling_glm4_moe.py: head_dim = getattr(config, "head_dim", None) or hidden_size // num_attention_heads
    ("glm4_moe", "head_dim"): {"quotient": ["hidden_size", "num_attention_heads"]},
    # modeling_lfm2.py: Lfm2ShortConv and Lfm2MLP are as wide as config.hidden_size
    ("lfm2", "conv_dim"): {"key": "hidden_size"},
    ("lfm2", "block_dim"): {"key": "hidden_size"},
    # modeling_modernbert.py: ModernBertEmbeddings' norm takes eps=config.norm_eps
    ("modernbert", "layer_norm_eps"): {"key": "norm_eps"},
}
# What the engine is given: nothing of the model's tokenizer or weights is needed to build it.
BUILD_ARGS = ["--skip-tokenizer-init", "--max-model-len", "256"]
ROUNDS = 8
MISSING = re.compile(r"'(\w+)' object has no attribute '(\w+)'")


def _python(venv: str) -> Path:
    python = ROOT / venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"config_names: no {venv}; `make envs` builds it")
    return python


def _run(python: Path, *args: str) -> str:
    env_vars = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), *args],
        cwd=str(ROOT),
        env=dict(os.environ, **env_vars),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"config_names: {python} {args[0]} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


# ---- run under a saver's Python ------------------------------------------------------------


def save(out: Path, architectures: List[str]) -> None:
    """Each architecture's transformers config class, its defaults saved into out/ARCH/ (with
    architectures naming it); out/index.json says what each is."""
    import inspect

    import transformers

    index = []
    for arch in architectures:
        try:
            config_class = getattr(transformers, arch).config_class
            config = config_class()
            config.architectures = [arch]
            config.save_pretrained(str(out / arch))
        except Exception:  # no such class here, or one whose defaults cannot be built or saved
            continue
        index.append(
            {
                "architecture": arch,
                "dir": str(out / arch),
                "model_type": config_class.model_type,
                "config_class": config_class.__name__,
                "attribute_map": {str(k): str(v) for k, v in (getattr(config_class, "attribute_map", None) or {}).items()},
                "source": inspect.getsourcefile(config_class) or "",
            }
        )
    (out / "index.json").write_text(json.dumps(index, indent=1), encoding="utf-8")
    print(transformers.__version__)


# ---- run under the engine's Python ---------------------------------------------------------


def build(jobs_file: Path) -> None:
    """Build each job's model class, stating the names found so far, until it builds or stops on
    something else: one JSON line per job."""
    sys.path[:0] = [str(ROOT / "common" / "engine_checks"), str(ROOT)]
    import model_build  # the engine side of doctor's MB (standalone: no import of the runtime package)

    from common.rules.r13_config_names import stated_value

    jobs = json.loads(jobs_file.read_text(encoding="utf-8"))
    for job in jobs["dirs"]:
        config = json.loads((Path(job["dir"]) / "config.json").read_text(encoding="utf-8"))
        carriers = jobs["carriers"].get(job["model_type"], {})
        overrides: Dict[str, Any] = {}
        found: List[List[str]] = []
        for _ in range(ROUNDS):
            args = BUILD_ARGS + (["--hf-overrides", json.dumps(overrides)] if overrides else [])
            answer = model_build.build({"path": job["dir"], "args": args, "env": {}})
            hit = MISSING.search(answer.get("reason", "")) if answer.get("ok") is False else None
            if hit is None or not hit.group(1).endswith("Config"):
                break
            found.append([hit.group(1), hit.group(2)])
            carrier = carriers.get(hit.group(2)) if hit.group(1) == job["config_class"] else None
            value = stated_value(config, carrier) if carrier else None
            if value is None or hit.group(2) in overrides:
                break  # a nested config's, or one nothing states: the builds of this one end here
            overrides[hit.group(2)] = value
        print(json.dumps(dict(job, found=found, ok=answer.get("ok"), reason=answer.get("reason", ""))), flush=True)


# ---- the sources' carriers -----------------------------------------------------------------


def renamed_in_source(source: str) -> Dict[str, str]:
    """old name -> key, for each `self.KEY = kwargs.pop("OLD", ...)` (or `.get`) of a config class's
    source: the class takes OLD as the old name of KEY."""
    out: Dict[str, str] = {}
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return out
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)):
            continue
        target, call = node.targets[0], node.value
        if (
            isinstance(target, ast.Attribute)
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in ("pop", "get")
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "kwargs"
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
            and call.args[0].value != target.attr
        ):
            out[call.args[0].value] = target.attr
    return out


def carriers_of(index: List[Dict[str, Any]]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """model_type -> name -> what carries it: the savers' attribute_maps and config sources, then
    CARRIERS."""
    out: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for entry in index:
        known = out.setdefault(entry["model_type"], {})
        source = Path(entry["source"]).read_text(encoding="utf-8") if entry["source"] else ""
        for name, key in dict(entry["attribute_map"], **renamed_in_source(source)).items():
            known.setdefault(name, {"key": key})
    for (model_type, name), carrier in CARRIERS.items():
        out.setdefault(model_type, {}).setdefault(name, carrier)
    return out


# ---- the driver ----------------------------------------------------------------------------


def examine(vllm: str, venv: str, work: Path) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """(model_type -> {"class", "names"}, the names found that nothing states, the architectures
    the engine could not build here) for one engine generation."""
    sys.path.insert(0, str(ROOT))
    from compat_build.model_fields import registry, site_packages

    site = site_packages(ROOT / venv)
    if site is None:
        raise SystemExit(f"config_names: no {venv}; `make envs` builds it")
    architectures = sorted(registry(site / "vllm" / "model_executor" / "models"))
    index: List[Dict[str, Any]] = []
    for saver in (AUTHOR_VENV, venv):
        out = work / saver.strip(".")
        out.mkdir(parents=True)
        version = _run(_python(saver), "save", str(out), *architectures).split()[-1]
        index += [dict(e, saved_by=version) for e in json.loads((out / "index.json").read_text(encoding="utf-8"))]
    carriers = carriers_of(index)
    jobs = work / "jobs.json"
    jobs.write_text(json.dumps({"dirs": index, "carriers": carriers}), encoding="utf-8")
    types = {e["config_class"]: e["model_type"] for e in index}
    table: Dict[str, Any] = {}
    unstated: List[str] = []
    unbuilt = set()
    for line in _run(_python(venv), "build", str(jobs)).splitlines():
        if not line.startswith("{"):
            continue
        result = json.loads(line)
        if result["ok"] is None:
            unbuilt.add(result["architecture"])
        for cls, name in result["found"]:
            model_type = types.get(cls, "?")
            carrier = carriers.get(model_type, {}).get(name)
            if carrier is None:
                unstated.append(f"{result['architecture']} saved by {result['saved_by']}: {cls}.{name}")
                continue
            entry = table.setdefault(model_type, {"class": cls, "names": {}})
            entry["names"][name] = carrier
    return {k: table[k] for k in sorted(table)}, sorted(set(unstated)), sorted(unbuilt)


def generate() -> Dict[str, Any]:
    engines: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="config-names-") as tmp:
        for vllm, venv in ENGINES.items():
            table, unstated, unbuilt = examine(vllm, venv, Path(tmp) / vllm)
            if unbuilt:
                print(f"config_names: vLLM {vllm} could not build here (ok null): {', '.join(unbuilt)}", file=sys.stderr)
            if unstated:
                raise SystemExit(f"config_names: vLLM {vllm} reads names nothing states (add them to CARRIERS): {'; '.join(unstated)}")
            engines[vllm] = table
    return engines


def render(engines: Dict[str, Any]) -> str:
    return (
        json.dumps({"source": "python -m compat_build.config_names (make config-names)", "engines": engines}, indent=1, sort_keys=True)
        + "\n"
    )


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["save"]:
        save(Path(argv[1]), argv[2:])
        return 0
    if argv[:1] == ["build"]:
        build(Path(argv[1]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m compat_build.config_names")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed table differs from what the engines say")
    opts = parser.parse_args(argv)
    text = render(generate())
    if opts.check:
        if OUT.read_text(encoding="utf-8") != text:
            print(f"config_names: {OUT.relative_to(ROOT)} is stale; run `python -m compat_build.config_names`", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"config_names: wrote {OUT.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
