"""The metrics port of a dispatcher, worker or notifier: ``/metrics`` for Prometheus,
``/healthz`` and ``/readyz`` for whatever supervises the process (Kubernetes probes,
a load balancer, ``curl``).

- ``/healthz``: 200 while the process serves HTTP at all (a liveness probe).
- ``/readyz``: 200 when MySQL and Redis answer within ``PROBE_TIMEOUT_SECONDS`` (each
  probed on a connection of its own, so a busy pool does not read as an outage), every
  loop the service keeps (``common.runtime.keep_serving``) is running rather than
  waiting to try again after a failure, every check the service adds (``add_check``; a
  dispatcher's ``leadership``) says ``ok``, and the service is not stopping; else 503
  with what is not. The body names the check, never a host or a password.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client
import redis
import sqlalchemy as sa

from common.config import StoreSettings
from common.db.engine import database_url
from common.errors import ConfigurationError

log = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 2.0
Probe = Callable[[], object]
Check = Callable[[], str]
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class Health:
    """What ``/readyz`` reports: store probes, the state of each serving loop, and
    whether the service is stopping."""

    def __init__(self, stopping: threading.Event) -> None:
        self._stopping = stopping
        self._probes: dict[str, Probe] = {}
        self._checks: dict[str, Check] = {}
        self._loops: dict[str, str] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="probe")

    def add_probe(self, name: str, probe: Probe) -> None:
        """Probe a store on every ``/readyz``: ``probe`` raises when it does not answer."""
        self._probes[name] = probe

    def add_check(self, name: str, check: Check) -> None:
        """Ask ``check`` on every ``/readyz``: it answers ``ok``, or why the service is not
        ready, from what the process knows (no store is called)."""
        self._checks[name] = check

    def loop_running(self, name: str) -> None:
        """A loop of the service (re)started its work."""
        with self._lock:
            self._loops[name] = "ok"

    def loop_waiting(self, name: str, error: BaseException) -> None:
        """A loop failed and waits before it tries again."""
        with self._lock:
            self._loops[name] = f"waiting to try again after {type(error).__name__}"

    def _probe(self, name: str, probe: Probe) -> str:
        try:
            self._pool.submit(probe).result(timeout=PROBE_TIMEOUT_SECONDS)
        except FutureTimeout:
            log.warning("readiness: %s did not answer within %.0f s", name, PROBE_TIMEOUT_SECONDS)
            return "unavailable"
        except Exception as e:
            log.warning("readiness: %s did not answer: %s", name, e)
            return "unavailable"
        return "ok"

    def readiness(self) -> tuple[bool, dict[str, str]]:
        """Whether the service is ready, and each check's word (``ok`` or why not)."""
        checks = {name: self._probe(name, probe) for name, probe in self._probes.items()}
        checks.update((name, check()) for name, check in self._checks.items())
        with self._lock:
            checks.update(self._loops)
        if self._stopping.is_set():
            checks["stopping"] = "the service is stopping"
        return all(v == "ok" for v in checks.values()), checks


def store_probes(settings: StoreSettings) -> Iterable[tuple[str, Probe]]:
    """Probes of MySQL and Redis on connections of their own, with short timeouts."""
    timeout = int(PROBE_TIMEOUT_SECONDS) or 1
    engine = sa.create_engine(
        database_url(settings),
        poolclass=sa.NullPool,
        connect_args={"connect_timeout": timeout, "read_timeout": timeout},
    )
    client = redis.Redis.from_url(
        settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout
    )

    def mysql() -> None:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    return [("mysql", mysql), ("redis", client.ping)]


def _json(start: StartResponse, status: str, body: object) -> list[bytes]:
    data = json.dumps(body).encode()
    start(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def probe_app(health: Health) -> Callable[[dict[str, Any], StartResponse], list[bytes]]:
    """The WSGI app of the metrics port: /healthz, /readyz, and metrics on any other path."""
    metrics = prometheus_client.make_wsgi_app()

    def app(environ: dict[str, Any], start: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/healthz":
            return _json(start, "200 OK", {"status": "ok"})
        if path == "/readyz":
            ready, checks = health.readiness()
            status = "200 OK" if ready else "503 Service Unavailable"
            return _json(start, status, {"ready": ready, "checks": checks})
        result: list[bytes] = metrics(environ, start)
        return result

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes come every few seconds: no line each."""


def _server_on(listening: socket.socket, host: str, port: int, app: Any) -> WSGIServer:
    """The metrics server on a socket already bound to ``host:port`` and listening:
    nothing else can have taken its port between the parent's choice and this start."""
    server = _Server((host, port), _QuietHandler, bind_and_activate=False)
    server.socket.close()
    server.socket = listening
    server.server_address = (host, port)
    server.server_name, server.server_port = host, port
    server.setup_environ()
    server.set_app(app)
    return server


def serve_probes(health: Health, port: int, host: str, inherited_fd: int | None = None) -> None:
    """Serve metrics and probes at ``http://host:port/`` from a daemon thread; on the
    listening socket ``inherited_fd`` instead, when the parent (``kairos up``) bound it."""
    app = probe_app(health)
    if inherited_fd is not None:
        listening = socket.socket(fileno=inherited_fd)
        host, port = listening.getsockname()[:2]
        server = _server_on(listening, host, port, app)
    else:
        try:
            server = make_server(host, port, app, _Server, _QuietHandler)
        except OSError as e:
            raise ConfigurationError(
                f"cannot serve metrics on {host}:{port} ({e.strerror or e}); "
                "pick another KAIROS_METRICS_PORT (--metrics-port)"
            ) from e
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics at http://%s:%d/metrics, probes at /healthz and /readyz", host, port)
