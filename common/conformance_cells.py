"""What the conformance matrix proved about a configuration on a card's engine.

`conformance_cells.json` (written by `make conformance` from conformance/results.json, baked into
every image with this package) holds, per card, each cell's architecture, the traits of its
configuration (config_traits.py), who saved it, and its result. A model is covered by the cell of
its card, architecture and traits, saved by a transformers of its own major version (a config
written by transformers 5 is read through the repairs of its format; one written by 4.x as is).

tokens: "proven" (the cell's greedy ids were the author's), "differs" (they were not), or
"unproven" (no cell covers the model, or its cell never answered). Standard library only.
"""

from __future__ import annotations

import json
import os

from .config_traits import config_traits

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

CELLS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conformance_cells.json")
TOKENS = {"exact": "proven", "differs": "differs"}
_TABLE: Dict[str, Any] = {}


def table() -> Dict[str, Any]:
    """The baked table (empty when the file is missing or unreadable: everything is unproven)."""
    if not _TABLE:
        try:
            with open(CELLS_FILE, encoding="utf-8") as fh:
                data = json.load(fh)
            _TABLE.update(data if isinstance(data, dict) else {})
        except (OSError, ValueError):
            _TABLE["cards"] = {}
    return _TABLE


def saver_of(config: Dict[str, Any]) -> str:
    """ "v5" for a config written by transformers 5, "legacy" otherwise (the engine's own era)."""
    version = config.get("transformers_version")
    major = str(version).split(".", 1)[0] if version else ""
    return "v5" if major.isdigit() and int(major) >= 5 else "legacy"


def cell_for(card: str, config: Dict[str, Any], max_model_len: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The cell that covers the model of `config` on `card`, or None."""
    cells: List[Dict[str, Any]] = table().get("cards", {}).get(card, {}).get("cells", [])
    architectures = config.get("architectures")
    if not cells or not isinstance(architectures, list) or not architectures:
        return None
    arch = architectures[0]
    traits = config_traits(config, max_model_len)
    saver = saver_of(config)
    matching = [c for c in cells if c.get("architecture") == arch and c.get("traits") == traits]
    own = [c for c in matching if c.get("saver") == saver]
    return (own or [None])[0]


def tokens(cell: Optional[Dict[str, Any]]) -> str:
    return TOKENS.get(cell.get("result", ""), "unproven") if cell else "unproven"
