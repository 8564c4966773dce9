"""Turning a job request into a validated ``NewJob``, or a clear error; nothing is written."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence, Set
from urllib.parse import urlsplit

import httpx

from common.cron import validate_cron, zone
from common.db.apps import App
from common.db.job_dependencies import After
from common.db.jobs import DEFAULT_PRIORITY, JobPolicies, NewJob
from common.documents import JsonObject, document_problem, stored_size
from common.errors import HandlerNotAllowedError, UnknownHandlerError, ValidationFailedError
from common.schedule import Schedule
from common.timefmt import MAX_INSTANT_MS, MIN_INSTANT_MS, parse_instant
from services.api.quotas import check_retries, check_schedule_interval, shortest_gap_seconds
from services.api.schemas import AfterJob, JobCreate


def defaulted_fields(body: JobCreate) -> set[str]:
    """The fields a request's digest leaves out when they hold their default: fields
    added since digests were first stored, so a retry of a request made before them
    still matches what was stored for it."""
    left_out = {"priority"} if body.priority == DEFAULT_PRIORITY else set()
    return (
        left_out
        | ({"jitterSeconds"} if body.jitterSeconds == 0 else set())
        | ({"after"} if not body.after else set())
    )


def request_hash(body: JobCreate) -> str:
    """A digest of what the request asks for, to compare a retry with the original."""
    content = body.model_dump(exclude={"clientRequestId", *defaulted_fields(body)})
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _url_problem(url: str) -> str | None:
    """Why ``url`` is no callback URL the notifier can send to, or None.

    Both URL readers Kairos uses must take it: ``urlsplit`` (here) and httpx (the
    notifier's client), which raise on text the other lets through.
    """
    if not url.isprintable() or any(c.isspace() for c in url):
        return "holds a space, a control character or a lone surrogate; percent-encode it"
    try:
        parts = urlsplit(url)
        port = parts.port
        # What the notifier builds; its host is decoded (IDNA) only when read.
        sent_to = httpx.Request("POST", url).url.host
    except Exception as e:  # both parsers raise several kinds (ValueError, IDNAError, ...)
        return f"cannot be read as a URL ({e})"
    if parts.scheme not in ("http", "https") or not parts.hostname or not sent_to:
        return "is not an absolute http:// or https:// URL"
    if port == 0:
        return "names port 0; give a port from 1 to 65535"
    return None


def check_callback_url(url: str) -> str:
    """Accept only absolute http(s) URLs with a host that the notifier can send to."""
    problem = _url_problem(url)
    if problem is not None:
        raise ValidationFailedError("callbackUrl", f"{_shown(url)} {problem}")
    return url


def check_params(body: JobCreate, max_bytes: int) -> None:
    """Refuse params that Kairos could not store and read back, or larger than ``max_bytes``."""
    check_document(body.params, max_bytes)


def check_document(params: JsonObject, max_bytes: int, field: str = "params") -> None:
    """Refuse a params object Kairos could not store and read back, or one larger than
    ``max_bytes``, naming ``field``.

    See ``common.documents``: nesting, lone surrogates, NaN and Infinity. The size is
    that of the JSON text stored, in UTF-8 bytes.
    """
    problem = document_problem(params, field)
    if problem is not None:
        raise ValidationFailedError(field, problem)
    size = stored_size(params)
    if size > max_bytes:
        raise ValidationFailedError(
            field, f"{field} take {size} bytes as JSON; the limit is {max_bytes} bytes"
        )


def _shown(value: object) -> str:
    """A value as an error message quotes it: clipped, so a long one cannot flood it."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_trigger_at(value: str | int, timezone: str) -> int:
    """``triggerAt`` as epoch ms: ISO 8601 text (a time without offset is a wall time
    in the job's ``timezone``) or epoch ms, from 1970 through 9999 (UTC)."""
    return parse_time_field(value, timezone, "triggerAt")


def parse_time_field(value: str | int, timezone: str, field: str) -> int:
    """A time a request gives in ``field``, as epoch ms: ISO 8601 text (a time without
    offset is a wall time in ``timezone``) or epoch ms, from 1970 through 9999 (UTC)."""
    try:
        moment = parse_instant(value, zone(timezone))
    except (ValueError, OverflowError) as e:
        raise ValidationFailedError(
            field, f"{_shown(value)} is neither ISO 8601 nor epoch milliseconds"
        ) from e
    if not MIN_INSTANT_MS <= moment <= MAX_INSTANT_MS:
        raise ValidationFailedError(
            field,
            f"{_shown(value)} is outside 1970-01-01T00:00:00Z .. 9999-12-31T23:59:59.999Z "
            f"(epoch ms {MIN_INSTANT_MS} .. {MAX_INSTANT_MS}); send a time in that range",
        )
    return moment


def first_trigger(body: JobCreate, schedule: Schedule, now_ms: int) -> int:
    """When the job first fires: triggerAt, else the next cron time, else now.

    A fixed-rate job without triggerAt fires first now, then every N seconds.
    """
    if body.triggerAt is not None:
        return parse_trigger_at(body.triggerAt, schedule.timezone)
    if schedule.cron_expr is not None:
        upcoming = schedule.first_after(now_ms, now_ms)
        if upcoming is None:
            raise ValidationFailedError("cronExpr", str(schedule.end_reason(now_ms)))
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
        jitter_seconds=body.jitterSeconds,
    )


def check_jitter(jitter_seconds: int, schedule: Schedule, now_ms: int) -> None:
    """Refuse jitter on a one-shot job, and jitter not shorter than the schedule's
    shortest interval (a trigger must fire before the next one is due)."""
    if jitter_seconds == 0:
        return
    if not schedule.recurring:
        raise ValidationFailedError(
            "jitterSeconds",
            "a one-shot job has no schedule to spread; jitterSeconds applies to cron and "
            "fixed-rate jobs only (leave it out, or give 0)",
        )
    gap = shortest_gap_seconds(schedule, now_ms)
    if gap is not None and jitter_seconds >= gap:
        raise ValidationFailedError(
            "jitterSeconds",
            f"{jitter_seconds} s is not less than the schedule's shortest interval between "
            f"two triggers ({gap:g} s); give less than {gap:g}",
        )


def check_handler(name: str, app: App, known_handlers: Set[str]) -> None:
    """Refuse a handler outside the app's handler patterns, then one no worker has
    registered; the latter's message lists only the registered handlers the app may use,
    so no app learns of the others."""
    if not app.handlers.allows(name):
        raise HandlerNotAllowedError(name, app.app_id, app.handlers.shown())
    if name not in known_handlers:
        usable = sorted(h for h in known_handlers if app.handlers.allows(h))
        raise UnknownHandlerError(name, usable)


def build_job(
    body: JobCreate,
    app: App,
    known_handlers: Set[str],
    max_params_bytes: int,
    now_ms: int,
    check_quotas: bool = True,
) -> NewJob:
    """Validate every field for ``app`` and return the job to insert; its schedule and
    retries are held to the app's shortest interval and retry limit unless
    ``check_quotas`` is off (a patch checks only what it changes)."""
    check_handler(body.jobHandler, app, known_handlers)
    check_params(body, max_params_bytes)
    schedule = build_schedule(body)
    check_jitter(body.jitterSeconds, schedule, now_ms)
    if check_quotas:
        check_schedule_interval(schedule, app, now_ms)
        check_retries(body.maxRetries, app)
    callback = check_callback_url(body.callbackUrl) if body.callbackUrl else None
    return NewJob(
        app_pk=app.id,
        job_name=body.jobName,
        handler=body.jobHandler,
        params=body.params,
        cron_expr=schedule.cron_expr,
        next_trigger_time=first_trigger(body, schedule, now_ms),
        callback_url=callback,
        client_request_id=body.clientRequestId,
        # Only a retry with the same clientRequestId is ever compared with the original;
        # hashing every body would weigh on every batch create.
        request_hash=request_hash(body) if body.clientRequestId is not None else None,
        policies=build_policies(body),
        priority=body.priority,
        after=build_after(body.after),
    )


def build_after(after: Sequence[AfterJob]) -> tuple[After, ...]:
    """The job's parents; one named twice is refused (the store checks the rest)."""
    seen: set[int] = set()
    for index, parent in enumerate(after):
        if parent.jobId in seen:
            raise ValidationFailedError(
                f"after[{index}].jobId", f"job {parent.jobId} is named twice; name it once"
            )
        seen.add(parent.jobId)
    return tuple(After(p.jobId, p.on) for p in after)
