"""The `[compat] ...` log lines: one per decision, on stderr, so vLLM's own stdout stays clean."""

from __future__ import annotations


import sys

TYPE_CHECKING = False  # typing costs milliseconds at every container start
if TYPE_CHECKING:
    from typing import Optional, TextIO

PREFIX = "[compat]"
_stream: Optional[TextIO] = sys.stderr


def say(message: str) -> None:
    """Write one log line; a broken or closed stderr must never stop the launch. (A stream of
    None is an fd that was closed when Python started: print would fall back to stdout.)"""
    if _stream is None:
        return
    try:
        print(f"{PREFIX} {message}", file=_stream, flush=True)
    except Exception:  # noqa: B902 - OSError, an encoding error, a stream closed under us
        pass


def set_stream(stream: Optional[TextIO]) -> None:
    global _stream
    _stream = stream
