"""Operator settings read from the environment (COMPAT_*): one reader per kind of value.

A setting's value comes from whoever starts the container, so a bad one (`inf`, `nan`, `-1`,
text, a number too large for `signal.alarm`) must never stop a start: it means the default,
and says so in one log line.
"""

from __future__ import annotations

from .log import say

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Mapping

# A day: longer than any sane preflight step, and well inside what signal.alarm accepts.
MAX_SECONDS = 86400.0


def seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """`env[name]` as a finite, positive number of seconds no larger than a day; the default
    (with a log line) for anything else, and silently when the variable is unset or empty."""
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_SECONDS:  # NaN and the infinities fail it too
        say(f"{name}={raw!r} is not a number of seconds in (0, {MAX_SECONDS:g}]; using {default:g}")
        return default
    return value
