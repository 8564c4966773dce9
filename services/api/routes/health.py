"""/healthz (the process serves) and /readyz (its stores answer)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from services.api.deps import StateDep

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


class Health(BaseModel):
    """The process serves."""

    status: Literal["ok"]


class StoreChecks(BaseModel):
    """Each store the API needs: ``ok`` or ``unavailable`` (why is in the API's log)."""

    mysql: Literal["ok", "unavailable"]
    redis: Literal["ok", "unavailable"]


class Readiness(BaseModel):
    """Whether every store answers, and which does not."""

    ready: bool
    checks: StoreChecks = Field(
        description="per store; the host and the driver's words stay in the log"
    )


@router.get("/healthz", operation_id="healthz", response_model=Health)
def healthz() -> dict[str, str]:
    """The API process is up and serving."""
    return {"status": "ok"}


def _check(name: str, probe: Callable[[], object]) -> str:
    try:
        probe()
    except Exception as e:
        log.warning("readiness: %s did not answer: %s", name, e)
        return "unavailable"
    return "ok"


@router.get(
    "/readyz",
    operation_id="readyz",
    response_model=Readiness,
    responses={
        503: {"model": Readiness, "description": "A store does not answer: `checks` names it"}
    },
)
def readyz(state: StateDep) -> JSONResponse:
    """MySQL and Redis answer; 503 names the one that does not (never its host or the
    driver's message, which the API logs)."""

    def mysql() -> None:
        with state.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    checks = {"mysql": _check("MySQL", mysql), "redis": _check("Redis", state.redis.ping)}
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
