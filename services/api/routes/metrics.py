"""/metrics: this API process's Prometheus metrics, in the text exposition format."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from common.metrics import EXPOSITION_CONTENT_TYPE, exposition

router = APIRouter(tags=["health"])


@router.get("/metrics", operation_id="metrics", include_in_schema=False)
def metrics() -> Response:
    """Every ``kairos_`` metric and the process collectors, for Prometheus to scrape."""
    return Response(exposition(), media_type=EXPOSITION_CONTENT_TYPE)
