"""Turning a job request into a validated ``NewJob``, or a clear error; nothing is written."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Set
from urllib.parse import urlsplit

from common.cron import validate_cron, zone
from common.db.jobs import JobPolicies, NewJob
from common.errors import UnknownHandlerError, ValidationFailedError
from common.schedule import Schedule
from common.timefmt import parse_instant
from services.api.schemas import JobCreate


def request_hash(body: JobCreate) -> str:
    """A digest of what the request asks for, to compare a retry with the original."""
    content = body.model_dump(exclude={"clientRequestId"})
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_callback_url(url: str) -> str:
    """Accept only absolute http(s) URLs with a host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailedError(
            "callbackUrl", f"{url!r} is not an absolute http:// or https:// URL"
        )
    return url


def check_params(body: JobCreate, max_bytes: int) -> None:
    """Refuse params that are not standard JSON or whose JSON is larger than ``max_bytes``.

    Python's JSON reader takes NaN and Infinity, which JSON (RFC 8259) does not have: such
    params were stored as written and came back as null.
    """
    try:
        text = json.dumps(body.params, separators=(",", ":"), allow_nan=False)
    except ValueError:
        raise ValidationFailedError(
            "params",
            "params hold NaN or Infinity, which JSON does not allow: send null or a string",
        ) from None
    size = len(text.encode())
    if size > max_bytes:
        raise ValidationFailedError(
            "params", f"params take {size} bytes as JSON; the limit is {max_bytes} bytes"
        )


def first_trigger(body: JobCreate, schedule: Schedule, now_ms: int) -> int:
    """When the job first fires: triggerAt, else the next cron time, else now.

    A fixed-rate job without triggerAt fires first now, then every N seconds.
    """
    if body.triggerAt is not None:
        try:
            return parse_instant(body.triggerAt)
        except ValueError as e:
            raise ValidationFailedError(
                "triggerAt", f"{body.triggerAt!r} is neither ISO 8601 nor epoch milliseconds"
            ) from e
    if schedule.cron_expr is not None:
        upcoming = schedule.first_after(now_ms, now_ms)
        assert upcoming is not None
        return upcoming
    return now_ms


def build_schedule(body: JobCreate) -> Schedule:
    """The job's schedule: cron in a zone, fixed rate, or one-shot; never both kinds."""
    if body.cronExpr is not None and body.fixedRateSeconds is not None:
        raise ValidationFailedError(
            "fixedRateSeconds", "give either cronExpr or fixedRateSeconds, not both"
        )
    zone(body.timezone)
    cron = validate_cron(body.cronExpr) if body.cronExpr is not None else None
    return Schedule(cron, body.timezone, body.fixedRateSeconds)


def build_policies(body: JobCreate) -> JobPolicies:
    """The job's policies from the request."""
    return JobPolicies(
        timezone=body.timezone,
        fixed_rate_seconds=body.fixedRateSeconds,
        misfire_policy=body.misfirePolicy,
        misfire_threshold_seconds=body.misfireThresholdSeconds,
        catch_up_window_seconds=body.catchUpWindowSeconds,
        overlap_policy=body.overlapPolicy,
        max_retries=body.maxRetries,
        retry_backoff_seconds=body.retryBackoffSeconds,
        retry_backoff_max_seconds=max(body.retryBackoffMaxSeconds, body.retryBackoffSeconds),
        timeout_seconds=body.timeoutSeconds,
    )


def build_job(
    body: JobCreate,
    app_pk: int,
    known_handlers: Set[str],
    max_params_bytes: int,
    now_ms: int,
) -> NewJob:
    """Validate every field and return the job to insert."""
    if body.jobHandler not in known_handlers:
        raise UnknownHandlerError(body.jobHandler, sorted(known_handlers))
    check_params(body, max_params_bytes)
    schedule = build_schedule(body)
    callback = check_callback_url(body.callbackUrl) if body.callbackUrl else None
    return NewJob(
        app_pk=app_pk,
        job_name=body.jobName,
        handler=body.jobHandler,
        params=body.params,
        cron_expr=schedule.cron_expr,
        next_trigger_time=first_trigger(body, schedule, now_ms),
        callback_url=callback,
        client_request_id=body.clientRequestId,
        # Only a retry with the same clientRequestId is ever compared with the original;
        # hashing every body cost ~10% of a batch create's CPU.
        request_hash=request_hash(body) if body.clientRequestId is not None else None,
        policies=build_policies(body),
    )
