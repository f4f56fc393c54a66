"""What a config.json value counts as a number, asked the same way by every reader of a count, a
size or a factor. JSON's true and false arrive as Python's bool, a subclass of int; NaN, Infinity
and 1e400 arrive as floats no computation should take (1e400 as an int too large for a float)."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Any, Optional

INFINITY = float("inf")


def integer(value: Any, minimum: Optional[int] = None) -> Optional[int]:
    """`value` as an integer of at least `minimum` (a boolean is none); None otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and (minimum is None or value >= minimum):
        return value
    return None


def positive_int(value: Any) -> Optional[int]:
    """`value` as an integer above 0 (a count, a size); None otherwise."""
    return integer(value, 1)


def number(value: Any, low: float = -INFINITY, high: float = INFINITY, low_open: bool = False) -> Optional[float]:
    """`value` as a finite float in [low, high] ((low, high] where `low_open`); None for a
    boolean, anything not a number, NaN, an infinity or an integer too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    # x - x is 0.0 for a finite x and NaN for NaN or an infinity (math.isfinite, without importing
    # math at every start).
    if x - x != 0.0 or not (x > low if low_open else x >= low) or x > high:
        return None
    return x


def positive_number(value: Any) -> Optional[float]:
    """`value` as a finite number above 0; None otherwise."""
    return number(value, 0.0, low_open=True)
