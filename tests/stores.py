"""What tests and benchmarks own in the stores, made and removed: a free port for a server
they start, and their namespace's database, vhost and Redis keys.

Benchmarks import this module too (bench/harness.py puts the repository root on
``sys.path`` for it), so it needs nothing that only the test runner has.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path
from urllib.parse import quote

import httpx
import redis
import sqlalchemy as sa

from common.config import StoreSettings
from common.db.engine import server_url
from common.vhost import management_api

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20_000


def ephemeral_start() -> int:
    """The first port the kernel hands out to outgoing connections (32768 if unknown)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


# Ports this process has handed out: a server given one may not have bound it yet, so a
# later pick must not return it again (seen: a worker and an API given one metrics port,
# the API's start failing with "address already in use").
_HANDED_OUT: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, below the ephemeral range, and never one this
    process handed out before.

    Asking the kernel for port 0 returns an ephemeral port, which any outgoing
    connection opened before the server binds it may take (seen: "address already in
    use" when the API started). Ports below that range are only ever bound on purpose.
    """
    top = ephemeral_start()
    for _ in range(200):
        port = random.randrange(LOWEST, max(LOWEST + 1, top))
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port between {LOWEST} and {top}")


def drop_database(settings: StoreSettings) -> None:
    """Drop the namespace's database."""
    engine = sa.create_engine(server_url(settings), poolclass=sa.NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS `{settings.namespace}`"))
    finally:
        engine.dispose()


def drop_vhost(settings: StoreSettings) -> None:
    """Delete the namespace's vhost with everything in it."""
    base, auth = management_api(settings)
    with httpx.Client(auth=auth, timeout=10.0) as client:
        response = client.delete(f"{base}/api/vhosts/{quote(settings.namespace, safe='')}")
        if response.status_code not in (204, 404):
            response.raise_for_status()


def drop_redis_keys(settings: StoreSettings) -> None:
    """Delete every Redis key under ``<namespace>:``."""
    client = redis.Redis.from_url(settings.redis_url)
    try:
        keys = list(client.scan_iter(match=f"{settings.namespace}:*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
