"""``kairos api``: serve the OpenAPI with uvicorn."""

from __future__ import annotations

import uvicorn

from common.config import ApiSettings
from common.db.engine import require_schema
from common.logs import setup_logging
from services.api.app import create_app


def run_api(settings: ApiSettings) -> None:
    """Serve until SIGTERM or SIGINT (uvicorn handles both)."""
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
