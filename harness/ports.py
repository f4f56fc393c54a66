"""Ports on 127.0.0.1 for the tests' own servers."""

import socket


def free_port() -> int:
    """A port nothing listens on right now: free for a server to take, or refused for a client
    (the socket that found it is closed when this returns)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
