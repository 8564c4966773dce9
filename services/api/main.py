"""``kairos api``: serve the OpenAPI with uvicorn."""

from __future__ import annotations

import logging
import signal
from types import FrameType

import uvicorn

from common.config import ApiSettings
from common.db.engine import require_schema
from common.logs import setup_logging
from services.api.app import create_app

log = logging.getLogger(__name__)


def _stopped(signum: int, _frame: FrameType | None) -> None:
    log.info("api stopped on signal %d", signum)


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
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=10,
    )
