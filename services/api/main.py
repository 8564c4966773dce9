"""``kairos api``: serve the OpenAPI with uvicorn."""

from __future__ import annotations

import logging
import signal
import socket
import threading
from types import FrameType

import uvicorn

from common.config import ApiSettings
from common.db.engine import require_schema
from common.logs import setup_logging
from common.probes import Health, serve_probes, store_probes
from services.api.app import create_app

log = logging.getLogger(__name__)


def _stopped(signum: int, _frame: FrameType | None) -> None:
    log.info("api stopped on signal %d", signum)


def serve_metrics(settings: ApiSettings) -> None:
    """Metrics, /healthz and /readyz on the metrics port (``common.probes``), apart from
    the API's port: that one is public, the process's figures are not."""
    if settings.metrics_port is None:
        return
    health = Health(threading.Event())
    for store, probe in store_probes(settings):
        health.add_probe(store, probe)
    serve_probes(health, settings.metrics_port, settings.metrics_host, settings.metrics_fd)


def run_api(settings: ApiSettings) -> None:
    """Serve until SIGTERM or SIGINT, then exit 0 after a graceful shutdown.

    uvicorn handles both signals while it serves; once shut down it restores the
    handlers it found and raises the signal again. With Python's defaults there, a
    clean stop ended with status -15 (SIGTERM) or a KeyboardInterrupt traceback.
    """
    signal.signal(signal.SIGTERM, _stopped)
    signal.signal(signal.SIGINT, _stopped)
    setup_logging("api", settings.log_level, settings.log_json)
    app = create_app(settings)
    require_schema(app.state.kairos.engine, settings.namespace)
    serve_metrics(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    # ``kairos up`` binds the port itself and hands the socket over, so that nothing can
    # take it between its check and this start, nor between two starts of this process.
    inherited = None if settings.api_fd is None else [socket.socket(fileno=settings.api_fd)]
    uvicorn.Server(config).run(sockets=inherited)
