"""What the rules that repair through the image's vLLM plugin (R8, R9, R10) share: whether the
card's engine will run it, and the repair that asks it for one transform.

The plugin (common/vllm_plugin) is never installed: a repair puts its directory first on
PYTHONPATH and names the transform in the plugin's variable for it. Whether that works is read
from the profile (the engine runs `vllm.general_plugins` entry points; its loader has the weight
iterator the plugin wraps) and from the container's VLLM_PLUGINS, which can exclude it.
"""

from __future__ import annotations


from ... import PLUGIN_DIR
from ...plan import Repair
from ...vllm_plugin.compat_plugin import PLUGIN_NAME

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Optional, Tuple

    from .base import Context


def blocker(ctx: Context, weights: bool = True) -> Optional[Tuple[str, str]]:
    """(severity, why) when the plugin would not run in this engine, else None. "error": it
    cannot; "unverified": the profile cannot say. `weights`: the repair wraps the weight
    iterator (R8, R9); registering a model class (R10) needs the general plugins only."""
    profile = ctx.profile
    engine = f"vLLM {profile.vllm_version}"
    hook = (profile.general_plugins, profile.weights_iterator_hook if weights else True)
    if False in hook:
        return "error", f"{engine} " + (
            "loads no general plugins" if profile.general_plugins is False else "has no weight iterator to wrap"
        )
    if None in hook:
        return "unverified", f"this profile cannot say whether {engine} runs general plugins"
    allowed = ctx.env.get("VLLM_PLUGINS")
    if allowed is not None and PLUGIN_NAME not in [p.strip() for p in allowed.split(",")]:
        return "error", f"VLLM_PLUGINS={allowed!r} does not allow {PLUGIN_NAME}"
    return None


def plugin_repair(code: str, title: str, detail: str, env: str, value: str) -> Repair:
    """The repair that asks the plugin for one transform: `env`=`value`, the plugin dir first on PYTHONPATH."""
    repair = Repair(code, title, detail, env={env: value})
    repair.path_prepend = {"PYTHONPATH": PLUGIN_DIR}
    return repair
