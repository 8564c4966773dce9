"""The web console at /console: server-rendered pages for operators, signed in with an
operator token (``kairos operator create``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from services.api.console import (
    alerts,
    apps,
    audit,
    dead_callbacks,
    executions,
    job_actions,
    jobs,
    overview,
    sign_in,
    workers,
)

STATIC = Path(__file__).parent / "static"


def install_console(app: FastAPI) -> None:
    """Serve the console's pages and its stylesheet and script (nothing from elsewhere)."""
    pages = (
        sign_in,
        overview,
        jobs,
        job_actions,
        workers,
        apps,
        executions,
        dead_callbacks,
        audit,
        alerts,
    )
    for module in pages:
        app.include_router(module.router)
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
