"""Ports for servers started a moment later."""

from __future__ import annotations

import socket

from tests.stores import LOWEST, ephemeral_start, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    port = free_port()
    assert LOWEST <= port < ephemeral_start()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_a_port_handed_out_is_never_handed_out_again() -> None:
    # Servers given ports bind them a moment later: two picks in one process must differ
    # even while nothing listens on the first (a worker and an API shared one before).
    picks = [free_port() for _ in range(2_000)]
    assert len(set(picks)) == len(picks)
