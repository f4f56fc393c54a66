"""Ports on 127.0.0.1 for the tests' own servers.

A port the kernel hands out (bind to port 0) is one of its ephemeral ports, which it also gives
every outgoing connection and every other bind to port 0 on the machine (vLLM's own ZMQ and
rendezvous sockets, the other test worker's clients): between the moment it is found free and
the moment a server binds it, another socket can take it ("address already in use", seen in a
full run). The ports here come from below the ephemeral range, which the kernel never hands out
by itself, each test worker (pytest-xdist's PYTEST_XDIST_WORKER) drawing from its own share.
"""

import os
import random
import re
import socket

# Below Linux's default ephemeral range (32768-60999: /proc/sys/net/ipv4/ip_local_port_range).
LOW, HIGH = 20000, 32000
SHARES = 8  # the most test workers the range is split for


def _share() -> range:
    """This process's share of the range: its test worker's (gw0, gw1, ...), else the whole."""
    found = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    if not found:
        return range(LOW, HIGH)
    size = (HIGH - LOW) // SHARES
    start = LOW + (int(found.group(1)) % SHARES) * size
    return range(start, start + size)


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nothing listens on right now, which no other socket is handed meanwhile: free for a
    server to take, or refused for a client (the socket that found it is closed when this
    returns). Where the share has none free, the kernel's choice."""
    share = _share()
    for port in random.sample(share, min(64, len(share))):
        if _free(port):
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
