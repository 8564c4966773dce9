"""Ports for servers started a moment later."""

from __future__ import annotations

import socket

from tests.stores import LOWEST, ephemeral_start, free_port


def test_a_free_port_is_below_the_ephemeral_range_and_bindable() -> None:
    port = free_port()
    assert LOWEST <= port < ephemeral_start()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
