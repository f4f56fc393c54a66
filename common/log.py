"""The `[compat] ...` log lines: one per decision, on stderr, so vLLM's own stdout stays clean."""

import sys
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
