"""/healthz (the process serves) and /readyz (its stores answer)."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from services.api.deps import StateDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="healthz")
def healthz() -> dict[str, str]:
    """The API process is up and serving."""
    return {"status": "ok"}


@router.get("/readyz", operation_id="readyz")
def readyz(state: StateDep) -> JSONResponse:
    """MySQL and Redis answer; 503 names the one that does not."""
    checks: dict[str, str] = {}
    try:
        with state.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        checks["mysql"] = "ok"
    except Exception as e:
        checks["mysql"] = f"error: {e}"
    try:
        state.redis.ping()
        checks["redis"] = "ok"
    except Exception as e:
        checks["redis"] = f"error: {e}"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
