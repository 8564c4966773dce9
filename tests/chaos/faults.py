"""Faults the chaos suite injects: into Kairos processes (signals) and into the stores.

Store restarts use each server's own tools (``rabbitmqctl``, ``mariadb-admin``,
``redis-cli``) and start it again as ``scripts/ensure-services.sh`` does; they touch
every test on the machine, so the scenarios that use them run alone (``serial``).
"""

from __future__ import annotations

import select
import socket
import subprocess
import threading
import time

import redis

from common.config import StoreSettings

SERVER_START_SECONDS = 120


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _wait_port(port: int, up: bool, seconds: float = SERVER_START_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while _answers(port) != up:
        if time.monotonic() > deadline:
            raise AssertionError(f"port {port} still {'down' if up else 'up'} after {seconds} s")
        time.sleep(0.2)


def _run(*argv: str, timeout: float = 120) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=timeout)


def restart_rabbitmq(down_seconds: float) -> None:
    """Stop the broker application (durable queues and persistent messages stay), start it."""
    _run("rabbitmqctl", "stop_app")
    time.sleep(down_seconds)
    _run("rabbitmqctl", "start_app")
    _run("rabbitmqctl", "await_startup")


def restart_mariadb(down_seconds: float) -> None:
    """Shut MariaDB down cleanly and start it again."""
    _run("mariadb-admin", "-uroot", "shutdown")
    _wait_port(3306, up=False)
    time.sleep(down_seconds)
    _run("start-stop-daemon", "--start", "--oknodo", "--background", "--exec", "/usr/sbin/mariadbd")
    _wait_port(3306, up=True)


def restart_redis(down_seconds: float) -> None:
    """Shut Redis down without saving (it keeps nothing on disk here) and start it again:
    every key is gone, as after a failover to an empty replica."""
    try:
        _run("redis-cli", "shutdown", "nosave")
    except subprocess.CalledProcessError:
        pass  # the connection closes as the server goes: that is the shutdown
    _wait_port(6379, up=False)
    time.sleep(down_seconds)
    _run(
        "redis-server",
        *("--daemonize", "yes", "--bind", "127.0.0.1", "--port", "6379"),
        *("--save", "", "--appendonly", "no"),
    )
    _wait_port(6379, up=True)


def wipe_redis_namespace(settings: StoreSettings) -> int:
    """Delete every Redis key of the namespace (leases, started keys, heartbeats)."""
    client = redis.Redis.from_url(settings.redis_url)
    try:
        keys = list(client.scan_iter(match=f"{settings.namespace}:*", count=1000))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


class TcpProxy:
    """A TCP relay in front of a server, which a scenario can turn into a black hole:
    connections stay open and nothing passes, as behind a dead link (no reset)."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._open = threading.Event()
        self._open.set()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self) -> None:
        """Stop relaying: every byte either way is held back from now on."""
        self._open.clear()

    def heal(self) -> None:
        """Relay again."""
        self._open.set()

    def close(self) -> None:
        """Stop accepting and close every relayed connection."""
        self._server.close()
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            self._sockets += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, a: socket.socket, b: socket.socket) -> None:
        peers = {a: b, b: a}
        try:
            while True:
                self._open.wait()
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for sock in ready:
                    if not self._open.is_set():
                        break
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except (OSError, ValueError):
            return  # closed under it: the proxy is shutting down
        finally:
            a.close()
            b.close()
