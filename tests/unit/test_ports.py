"""The test servers' ports: below the kernel's ephemeral range, a share per test worker, never one
that a socket holds."""

import socket

from harness import ports


def ephemeral() -> range:
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    return range(low, high + 1)


def test_each_worker_draws_below_the_ephemeral_range_from_a_share_of_its_own(monkeypatch):
    drawn = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        drawn[worker] = {ports.free_port() for _ in range(20)}
    assert not drawn["gw0"] & drawn["gw1"]
    assert not (drawn["gw0"] | drawn["gw1"]) & set(ephemeral())


def test_a_port_a_socket_holds_is_never_drawn(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setattr(ports, "SHARES", (ports.HIGH - ports.LOW) // 2)  # a share of two ports
    held = socket.socket()
    try:
        share = ports._share()
        held.bind(("127.0.0.1", share[0]))
        assert {ports.free_port() for _ in range(10)} == {share[1]}
    finally:
        held.close()
