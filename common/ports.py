"""Picking a TCP port for a server that starts a moment later (tests, benchmarks)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20_000


def ephemeral_start() -> int:
    """The first port the kernel hands out to outgoing connections (32768 if unknown)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, below the ephemeral range.

    Asking the kernel for port 0 returns an ephemeral port, which any outgoing
    connection opened before the server binds it may take (seen: "address already in
    use" when the API started). Ports below that range are only ever bound on purpose.
    """
    top = ephemeral_start()
    for _ in range(200):
        port = random.randrange(LOWEST, max(LOWEST + 1, top))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {top}")
