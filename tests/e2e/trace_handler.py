"""A handler that returns the traceparent it was given, so a test can see ``ctx.trace``."""

from __future__ import annotations

from typing import Any

from services.worker.registry import HandlerContext, handler


@handler("test.trace")
def report_trace(params: dict[str, Any], ctx: HandlerContext) -> dict[str, str | None]:
    """Return ``ctx.trace`` as the run's result."""
    return {"trace": ctx.trace}
