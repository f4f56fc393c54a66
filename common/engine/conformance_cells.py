"""What the conformance matrix proved about a configuration on a card's engine.

`conformance_cells.json` (written by `make conformance` from conformance/results.json, baked into
every image with this package) holds, per card, each cell's architecture, the traits of its
configuration (common/model/config_traits.py), who saved it, its tensor-parallel size and its result; for a
cell that was not exact, its `culprit`: the traits in which it differs from the nearest exact
cell of its architecture (none: no cell of the architecture is exact); and per architecture and
saver, the `coverage`: every value class (common/model/config_values.py) its exact cells exercised.

tokens: "proven" only when the model's traits equal an exact cell's, saved by a transformers of
its own major version (a config written by transformers 5 is read through the repairs of its
format; one written by 4.x as is), AND every value its architecture's model code reads
(model_fields.json) is covered, at the tensor-parallel size asked, with its quantization method;
above size 1, one exact cell ran at that size with the model's sharding (config_traits.sharding);
"differs" where a cell that answered other tokens has the model's culprit traits; "unproven"
otherwise, with `open`: what no cell covered. Deny by default. Standard library only.
"""

from __future__ import annotations

import json
import os

from ..model.config_traits import config_traits, groups, sharding
from ..model.config_values import config_values, uncovered

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple

    from .vllm_args import UserArgs

HERE = os.path.dirname(os.path.abspath(__file__))
CELLS_FILE = os.path.join(HERE, "conformance_cells.json")
FIELDS_FILE = os.path.join(HERE, "model_fields.json")
TOKENS = {"exact": "proven", "differs": "differs"}
_TABLE: Dict[str, Any] = {}
_FIELDS: Dict[str, Any] = {}


def _load(path: str, into: Dict[str, Any], empty: Dict[str, Any]) -> Dict[str, Any]:
    if not into:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
            into.update(data if isinstance(data, dict) else empty)
        except (OSError, ValueError):
            into.update(empty)
    return into


def table() -> Dict[str, Any]:
    """The baked table (empty when the file is missing or unreadable: everything is unproven)."""
    return _load(CELLS_FILE, _TABLE, {"cards": {}})


def fields_table() -> Dict[str, Any]:
    """model_fields.json (empty when missing: no field can be placed, so nothing is proven)."""
    return _load(FIELDS_FILE, _FIELDS, {"engines": {}})


def saver_of(config: Mapping[str, Any]) -> str:
    """ "v5" for a config written by transformers 5, "legacy" otherwise (the engine's own era)."""
    version = config.get("transformers_version")
    major = str(version).split(".", 1)[0] if version else ""
    return "v5" if major.isdigit() and int(major) >= 5 else "legacy"


def _architecture(config: Mapping[str, Any]) -> Optional[str]:
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return None


def _card(card: str) -> Dict[str, Any]:
    entry = table().get("cards", {}).get(card)
    return entry if isinstance(entry, dict) else {}


def _cells(card: str, arch: Optional[str], saver: str) -> List[Dict[str, Any]]:
    return [c for c in _card(card).get("cells", []) if c.get("architecture") == arch and c.get("saver") == saver]


def cell_for(card: str, config: Mapping[str, Any], max_model_len: Optional[str] = None, tp: int = 1) -> Optional[Dict[str, Any]]:
    """The cell of the model's architecture, traits, saver and tensor-parallel size on `card`."""
    cells = _cells(card, _architecture(config), saver_of(config))
    if not cells:
        return None
    traits = config_traits(dict(config), max_model_len)
    same = [c for c in cells if c.get("traits") == traits]
    # An exact cell first (a failed twin of it tells nothing: report.py's `unattributed`), then
    # the size asked; another size's cell still names the traits' cell (the size itself is
    # judged as a value: @tensor_parallel_size).
    same.sort(key=lambda c: (c.get("result") != "exact", int(c.get("tp") or 1) != tp))
    return (same or [None])[0]


def failing_cell(
    card: str, config: Mapping[str, Any], max_model_len: Optional[str] = None, values: Optional[Mapping[str, List[str]]] = None
) -> Optional[Dict[str, Any]]:
    """A cell that was not exact whose culprit the model has: the configuration values no exact
    cell exercised (`culprit_values`) and the traits in which it differs from its nearest exact
    cell (`culprit`), whatever else the model's configuration says. A cell without a culprit
    speaks for its very traits only where no exact cell has them too (`unattributed`: nothing
    tells what made it differ); beyond them the model is unproven, never failed on a guess."""
    cells = [c for c in _cells(card, _architecture(config), saver_of(config)) if c.get("result") != "exact"]
    if not cells:
        return None
    traits = config_traits(dict(config), max_model_len)
    have = {f"{path}={cls}" for path, classes in (values or {}).items() for cls in classes}
    for cell in cells:
        culprit, culprit_values = cell.get("culprit"), cell.get("culprit_values")
        if not isinstance(culprit, dict):
            culprit = {}
        if isinstance(culprit_values, list) and culprit_values:
            if set(culprit_values) <= have and all(traits.get(k) == v for k, v in culprit.items()):
                return cell
        elif culprit:
            if all(traits.get(k) == v for k, v in culprit.items()):
                return cell
        elif not cell.get("unattributed") and cell.get("traits") == traits:
            return cell
    return None


def model_values(
    card: str, config: Mapping[str, Any], tp: int = 1, quantize_config: Optional[Mapping[str, Any]] = None, **engine_args: Any
) -> Optional[Dict[str, List[str]]]:
    """The model's value classes for the fields its architecture's code reads on `card`'s
    engine (None where no field table has the architecture)."""
    fields = fields_table().get("engines", {}).get(_card(card).get("vllm"), {}).get(_architecture(config) or "")
    return None if fields is None else config_values(config, fields, quantize_config, tp, **engine_args)


def open_values(card: str, config: Mapping[str, Any], values: Optional[Mapping[str, List[str]]]) -> List[str]:
    """What of the model's configuration (`values`: model_values) no exact cell of its
    architecture and saver on `card` exercised (`field=value`): empty only when every value its
    model code reads is covered."""
    entry, arch = _card(card), _architecture(config)
    if values is None:
        return [f"no field table for {arch} on vLLM {entry.get('vllm')} (compat_build.model_fields)"]
    coverage = entry.get("coverage", {}).get(arch, {}).get(saver_of(config))
    if not coverage:
        return [f"no exact cell of {arch} saved by transformers {saver_of(config)}"]
    return uncovered(values, coverage)


def judge(
    card: str,
    config: Mapping[str, Any],
    max_model_len: Optional[str] = None,
    tp: int = 1,
    quantize_config: Optional[Mapping[str, Any]] = None,
    **engine_args: Any,
) -> Tuple[str, Optional[Dict[str, Any]], List[str]]:
    """(tokens, the cell that decides, what stays open) for the model of `config` on `card`,
    started at tensor-parallel size `tp` with `engine_args` (config_values' keyword arguments:
    the platform's --quantization, --kv-cache-dtype, --pipeline-parallel-size, and the dtype
    --dtype serves)."""
    values = model_values(card, config, tp, quantize_config, **engine_args)
    failing = failing_cell(card, config, max_model_len, values)
    if failing is not None:
        tokens = TOKENS.get(str(failing.get("result")), "unproven")
        why = (
            []
            if tokens != "unproven"
            else [f"its cell {failing.get('variant')} (saved by {failing.get('saved_by')}) was {failing.get('result')}"]
        )
        return tokens, failing, why
    cell = cell_for(card, config, max_model_len, tp)
    open_list = open_values(card, config, values)
    if cell is None:
        # No cell has all its traits: each trait must then have been exercised by an exact cell,
        # as each configuration value must; the deciding cell is the exact one nearest to it.
        cell, unseen = nearest_exact(card, config, max_model_len)
        open_list[:0] = unseen
    if tp > 1:
        open_list.extend(unsharded(card, config, tp))
    if cell is not None and cell.get("result") != "exact" and not open_list:
        # Never unproven without saying why.
        open_list = [f"its cell {cell.get('variant')} (saved by {cell.get('saved_by')}) was {cell.get('result')}"]
    if cell is None or open_list:
        return "unproven", cell, open_list
    return "proven", cell, []


def unsharded(card: str, config: Mapping[str, Any], tp: int) -> List[str]:
    """At tensor-parallel size `tp` > 1: [] where an exact cell of the model's architecture and
    saver ran at that very size with the model's sharding (its KV heads split or replicated over
    the ranks, its experts cut), else what is missing. Values proven at another size do not carry
    over: sharding is where a backport or a kernel goes wrong silently."""
    need = sharding(dict(config), tp)
    for cell in _cells(card, _architecture(config), saver_of(config)):
        if cell.get("result") == "exact" and int(cell.get("tp") or 1) == tp and cell.get("sharding") == need:
            return []
    return [f"no exact cell at --tensor-parallel-size {tp} with its sharding ({need})"]


def start_view(config: Mapping[str, Any], user: UserArgs) -> Tuple[Dict[str, Any], Dict[str, Any], List[str]]:
    """(the configuration the engine reads under the start's --hf-overrides and its own flags
    (start_flags.py), the start's arguments as judge() takes them with the context it is served
    with (`max_model_len`), what of them cannot be placed)."""
    from .start_flags import served_dtype, with_start_flags
    from .vllm_args import int_arg

    view, problems = dict(config), []
    if user.has("--hf-overrides"):
        text = user.value("--hf-overrides")
        try:
            overrides = json.loads(text) if text is not None and not user.dotted("--hf-overrides") else None
        except ValueError:
            overrides = None
        if isinstance(overrides, dict):
            view = _merged(view, overrides)
        else:
            problems.append("--hf-overrides that doctor cannot read as one JSON object")
    view, max_model_len, flag_problems = with_start_flags(view, user, user.value("--max-model-len"))
    args = {
        "max_model_len": max_model_len,
        "tp": tensor_parallel_size(user),
        "quantization": user.value("--quantization"),
        "kv_cache_dtype": user.value("--kv-cache-dtype") or "auto",
        "pipeline_parallel": int_arg(user, "--pipeline-parallel-size") or 1,
        "dtype": served_dtype(view, user.value("--dtype")),
    }
    return view, args, problems + flag_problems


def tensor_parallel_size(user: UserArgs) -> int:
    """The size the platform's arguments start the model at (-tp or --tensor-parallel-size; 1)."""
    from .vllm_args import int_arg

    return int_arg(user, "--tensor-parallel-size") or 1


def _merged(base: Dict[str, Any], overrides: Mapping[str, Any]) -> Dict[str, Any]:
    """`overrides` over `base`, nested objects merged key by key (as vLLM applies hf_overrides)."""
    out = dict(base)
    for key, value in overrides.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def judge_start(
    card: str, config: Mapping[str, Any], user: UserArgs, quantize_config: Optional[Mapping[str, Any]] = None, tp: Optional[int] = None
) -> Tuple[str, Optional[Dict[str, Any]], List[str]]:
    """judge() for a start with the platform's arguments (a UserArgs), at their tensor-parallel
    size or at `tp` where given (the smallest one memory says holds the model)."""
    view, args, problems = start_view(config, user)
    asked, max_model_len = args.pop("tp"), args.pop("max_model_len")
    tp = asked if tp is None else tp
    tokens, cell, open_list = judge(card, view, max_model_len, tp, quantize_config, **args)
    if problems and tokens == "proven":
        return "unproven", cell, problems
    return tokens, cell, problems + open_list


def failing_start(card: str, config: Mapping[str, Any], user: UserArgs) -> Optional[Dict[str, Any]]:
    """failing_cell() for a start with the platform's arguments (a UserArgs)."""
    view, args, _ = start_view(config, user)
    tp, max_model_len = args.pop("tp"), args.pop("max_model_len")
    return failing_cell(card, view, max_model_len, model_values(card, view, tp, None, **args))


def nearest_exact(card: str, config: Mapping[str, Any], max_model_len: Optional[str] = None) -> Tuple[Optional[Dict[str, Any]], List[str]]:
    """(the exact cell of the model's architecture and saver sharing most of its traits, the
    model's traits no exact cell has: `trait kv=mqa`)."""
    exact = [c for c in _cells(card, _architecture(config), saver_of(config)) if c.get("result") == "exact"]
    traits = config_traits(dict(config), max_model_len)
    if not exact:
        return None, ["its traits (" + _trait_text(config, max_model_len) + ") in no exact cell of its architecture and saver"]
    # Traits that change the same computation must have been exercised together by one cell.
    unseen = [
        _unseen_text(group, traits)
        for group in groups(traits)
        if not any(all(c.get("traits", {}).get(k) == traits[k] for k in group) for c in exact)
    ]
    nearest = max(exact, key=lambda c: sum(c.get("traits", {}).get(k) == v for k, v in traits.items()))
    return nearest, unseen


def _unseen_text(group: Tuple[str, ...], traits: Mapping[str, Any]) -> str:
    """`trait kv=mqa`, or for traits judged together `traits rope=longrope, rope_regime=past,
    partial_rotary=True together`."""
    if len(group) == 1:
        return f"trait {group[0]}={traits[group[0]]}"
    return "traits " + ", ".join(f"{k}={traits[k]}" for k in group) + " together"


def _trait_text(config: Mapping[str, Any], max_model_len: Optional[str]) -> str:
    traits = config_traits(dict(config), max_model_len)
    return ", ".join(f"{k}={v}" for k, v in sorted(traits.items()) if v not in (False, None, [], "none", "default", "derived"))


def tokens(cell: Optional[Dict[str, Any]]) -> str:
    return TOKENS.get(cell.get("result", ""), "unproven") if cell else "unproven"
