"""The `[compat] ...` log lines: one per decision, on stderr, so vLLM's own stdout stays clean."""

from __future__ import annotations


import sys

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import TextIO

PREFIX = "[compat]"
_stream: TextIO = sys.stderr


def say(message: str) -> None:
    """Write one log line; a broken stderr must never stop the launch."""
    try:
        print(f"{PREFIX} {message}", file=_stream, flush=True)
    except Exception:
        pass


def set_stream(stream: TextIO) -> None:
    global _stream
    _stream = stream
