"""A handler that counts its runs in Redis, so a test can tell whether a job ran twice."""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Any

import redis

from services.worker.registry import HandlerContext, handler


@cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("KAIROS_REDIS_URL", "redis://127.0.0.1:6379/0"))


def runs_key(namespace: str, job_id: int) -> str:
    """Where ``test.count`` counts the runs of one job."""
    return f"{namespace}:test-runs:{job_id}"


@handler("test.count")
def count(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Count this run of the job, then sleep ``params["seconds"]`` (default 0)."""
    _client().incr(runs_key(os.environ["KAIROS_NAMESPACE"], ctx.job_id))
    time.sleep(float(params.get("seconds", 0)))
