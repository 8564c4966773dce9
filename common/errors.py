"""One error root for Kairos; every domain error derives from ``KairosError``.

Subclasses carry the data an operator or an API client needs; driver errors are kept as
``__cause__`` by raising with ``from``. Only ``services.api`` turns these into HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.secrets_mask import mask_text, masked_url


class KairosError(Exception):
    """Root of every error Kairos raises on purpose."""


class ConfigurationError(KairosError):
    """A setting is missing or malformed; the message names the variable to fix."""


class StoreUnavailableError(KairosError):
    """MySQL, Redis or RabbitMQ did not answer; the message says which and where."""

    def __init__(self, store: str, url: str, detail: str) -> None:
        # Credentials never reach a log line or an operator's terminal.
        shown = masked_url(url)
        super().__init__(f"{store} at {shown} is not reachable: {mask_text(detail)}")
        self.store = store
        self.url = shown


class StoreAccessDeniedError(KairosError):
    """A store answered but refused the user Kairos connects as (a wrong password, or a
    right the user lacks)."""

    def __init__(self, store: str, url: str, detail: str) -> None:
        shown = masked_url(url)
        super().__init__(
            f"{store} at {shown} refused access: {mask_text(detail)}; check the user's "
            'password and rights (docs/production.md, "Users and rights")'
        )
        self.store = store
        self.url = shown


class ValidationFailedError(KairosError):
    """Input is invalid; ``field`` names the offending input (a job request's field, or
    an operator command's flag)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class IdempotencyConflictError(KairosError):
    """An idempotency key (``clientRequestId`` or the ``Idempotency-Key`` header) was
    reused with a different request; ``job_id`` is the job the first request made, when
    it made one."""

    def __init__(
        self, key: str, job_id: int | None, name: str = "clientRequestId", what: str = ""
    ) -> None:
        first = what or (f"job {job_id}" if job_id is not None else "another request")
        super().__init__(
            f"{name} {key!r} was already used for {first} with a different body; send the "
            f"original request or use a new {name}"
        )
        self.client_request_id = key
        self.job_id = job_id


class IdempotencyKeyInUseError(KairosError):
    """A request with the same Idempotency-Key is still being answered; nothing was
    written by this one."""

    def __init__(self, key: str) -> None:
        super().__init__(
            f"a request with Idempotency-Key {key!r} is still in progress; retry in a moment "
            "with the same key to get its answer"
        )
        self.key = key


class BatchRejectedError(KairosError):
    """Items of a batch create are invalid; nothing was written.

    ``items`` pairs each bad item's index in the batch with what is wrong with it: a
    ``ValidationFailedError`` or an ``IdempotencyConflictError``, in index order.
    """

    def __init__(self, items: Sequence[tuple[int, KairosError]]) -> None:
        first_index, first_error = items[0]
        more = f" (and {len(items) - 1} more bad items)" if len(items) > 1 else ""
        super().__init__(
            f"jobs[{first_index}]: {first_error}{more}; nothing was written, "
            "fix every listed item and send the whole batch again"
        )
        self.items = tuple(items)


class JobNotFoundError(KairosError):
    """No job with that id exists for the calling app."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"job {job_id} does not exist")
        self.job_id = job_id


class ExecutionNotFoundError(KairosError):
    """No execution with that id belongs to a job of the calling app."""

    def __init__(self, execution_id: str) -> None:
        super().__init__(f"execution {execution_id} does not exist")
        self.execution_id = execution_id


class DeliveryNotFoundError(KairosError):
    """No callback delivery with that id belongs to a job of the calling app."""

    def __init__(self, delivery_id: str) -> None:
        super().__init__(f"callback delivery {delivery_id} does not exist")
        self.delivery_id = delivery_id


class DeliveryInFlightError(KairosError):
    """A replay of a callback delivery still on its way (neither DELIVERED nor DEAD)."""

    def __init__(self, delivery_id: str, state: str) -> None:
        super().__init__(
            f"callback delivery {delivery_id} is {state}: only a DELIVERED or DEAD one can be "
            "replayed; this one is still on its way (see nextAttemptAt)"
        )
        self.delivery_id = delivery_id
        self.state = state


class InvalidTransitionError(KairosError):
    """A job control action that the job's current status does not allow; nothing changed."""

    def __init__(self, job_id: int, status: str, action: str, allowed: Sequence[str]) -> None:
        words = [str(s) for s in allowed]
        listed = " or ".join(filter(None, [", ".join(words[:-1]), words[-1]]))
        done = "cancelled" if action == "cancel" else action.removesuffix("e") + "ed"
        super().__init__(f"job {job_id} is {status}; only a {listed} job can be {done}")
        self.job_id = job_id
        self.status = status
        self.action = action
        self.allowed = tuple(words)


class UnknownAppError(KairosError):
    """No app has that app id."""

    def __init__(self, app_id: str) -> None:
        super().__init__(f"no app {app_id!r}; `kairos app list` shows the apps")
        self.app_id = app_id


class AmbiguousAppError(KairosError):
    """An app named by its name, which several apps share."""

    def __init__(self, name: str, app_ids: Sequence[str]) -> None:
        super().__init__(
            f"{len(app_ids)} apps are named {name!r} ({', '.join(app_ids)}); name one by its app id"
        )
        self.name = name
        self.app_ids = tuple(app_ids)


class RotationOpenError(KairosError):
    """A signing-secret rotation is still in its overlap; another would end it early."""

    def __init__(self, app_id: str, until: str) -> None:
        super().__init__(
            f"app {app_id!r} still signs with its previous secret until {until}; rotating "
            "again now would drop that secret at once: wait, or pass --force"
        )
        self.app_id = app_id


class OperatorExistsError(KairosError):
    """An operator with that name exists already."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"an operator named {name!r} exists already; `kairos operator list` shows them, "
            "`kairos operator revoke NAME` removes one"
        )
        self.name = name


class UnknownOperatorError(KairosError):
    """No operator has that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no operator {name!r}; `kairos operator list` shows them")
        self.name = name


class WorkerNotLiveError(KairosError):
    """An operator asked a worker that is not running to drain."""

    def __init__(self, worker_id: str, why: str) -> None:
        super().__init__(f"worker {worker_id!r} cannot be drained: {why}")
        self.worker_id = worker_id


class WorkerNotDrainedError(KairosError):
    """An operator undrained a worker that no standing drain holds."""

    def __init__(self, worker_id: str) -> None:
        super().__init__(
            f"worker {worker_id!r} is not drained: nothing to undrain (a worker asked to "
            "drain and stop cannot be undrained; start it again instead)"
        )
        self.worker_id = worker_id


class AuthenticationError(KairosError):
    """The API key is missing or unknown."""


class AppDisabledError(KairosError):
    """The API key belongs to an app an operator disabled; nothing it asks is done."""

    def __init__(self, app_id: str) -> None:
        super().__init__(
            f"app {app_id!r} is disabled; ask an operator to enable it (`kairos app enable "
            f"{app_id}`)"
        )
        self.app_id = app_id


class UnknownHandlerError(ValidationFailedError):
    """A handler name that no worker has registered."""

    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(known[:20]) or "none yet"
        super().__init__(
            "jobHandler",
            f"no worker has registered {name!r}; start a worker whose --handlers module "
            f"defines it (registered: {listed})",
        )
        self.name = name


def _set_by_operator(app_id: str) -> str:
    return (
        f"an operator grants handlers with `kairos app handlers {app_id} --allow PATTERN`, "
        "e.g. --allow 'report.*'"
    )


class HandlerNotAllowedError(ValidationFailedError):
    """A job names a handler outside its app's handler patterns; nothing was written."""

    def __init__(self, name: str, app_id: str, patterns: str) -> None:
        allowed = (
            "this app has been granted no handler yet"
            if patterns == "none"
            else f"this app may use only handlers matching {patterns}"
        )
        super().__init__(
            "jobHandler",
            f"{allowed}; {name!r} is not one of them ({_set_by_operator(app_id)})",
        )
        self.name = name
        self.app_id = app_id


class JobHandlerForbiddenError(KairosError):
    """A request would run a stored job whose handler its app may no longer use (the
    patterns changed after the job was stored); nothing was written."""

    def __init__(self, job_id: int, action: str, name: str, app_id: str, patterns: str) -> None:
        super().__init__(
            f"job {job_id} runs handler {name!r}, which this app may no longer use (it may "
            f"use only handlers matching {patterns}), so it cannot be {action}; pause, "
            f"cancel or delete it, or ask an operator: {_set_by_operator(app_id)}"
        )
        self.job_id = job_id
        self.name = name
        self.app_id = app_id


class ExecutionNotStuckError(KairosError):
    """An operator's action on an execution that cannot take it; the message says why."""

    def __init__(self, execution_id: str, why: str) -> None:
        super().__init__(f"execution {execution_id}: {why}")
        self.execution_id = execution_id


class PublishFailedError(KairosError):
    """RabbitMQ refused (nack) or could not route (return) a message."""


class RateLimitedError(KairosError):
    """An app sent more requests than its rate limit allows; it may retry after a while."""

    def __init__(self, app_id: str, retry_after_seconds: int) -> None:
        super().__init__(
            f"app {app_id!r} sent more requests than its rate limit allows; retry after "
            f"{retry_after_seconds} s, or spread requests out (a batch create counts one per "
            "job, a backfill one per run it creates)"
        )
        self.app_id = app_id
        self.retry_after_seconds = retry_after_seconds


class AuthThrottledError(KairosError):
    """A client address failed authentication too often in a short while; it may try
    again after ``retry_after_seconds``."""

    def __init__(self, retry_after_seconds: int) -> None:
        super().__init__(
            "too many failed sign-ins or unknown API keys from this address; retry after "
            f"{retry_after_seconds} s with a valid key (`kairos app rotate-key` issues one)"
        )
        self.retry_after_seconds = retry_after_seconds


class JobQuotaExceededError(KairosError):
    """An app holds as many stored jobs as its ``max_jobs`` quota allows; nothing was
    written."""

    def __init__(self, app_id: str, max_jobs: int, stored: int, adding: int) -> None:
        super().__init__(
            f"app {app_id!r} keeps {stored} jobs (waiting, running or paused) and its "
            f"quota maxJobs is {max_jobs}, so {adding} more do not fit; delete or cancel "
            f"jobs it no longer needs, or ask an operator to raise the quota (`kairos app "
            f"limits {app_id} --max-jobs N`)"
        )
        self.app_id = app_id
        self.max_jobs = max_jobs
        # A 429 carries Retry-After; jobs end and free room, so a minute is a fair guess.
        self.retry_after_seconds = 60


class ScheduleTooFrequentError(ValidationFailedError):
    """A schedule whose triggers come closer together than the app's
    ``min_cron_interval_seconds`` quota allows; nothing was written."""

    def __init__(self, field: str, app_id: str, gap_seconds: float, minimum: int) -> None:
        super().__init__(
            field,
            f"fires {gap_seconds:g} s after a trigger at its closest; this app's quota "
            f"minCronIntervalSeconds is {minimum} s: space the triggers out, or ask an "
            f"operator to lower the quota (`kairos app limits {app_id} --min-cron-interval "
            "SECONDS|none`)",
        )
        self.gap_seconds = gap_seconds
        self.minimum = minimum


class RetriesOverLimitError(ValidationFailedError):
    """A job asking for more retries than its app's ``max_retries`` limit allows;
    nothing was written."""

    def __init__(self, app_id: str, asked: int, limit: int) -> None:
        super().__init__(
            "maxRetries",
            f"{asked} retries asked; this app's limit maxRetries is {limit}: ask for at "
            f"most {limit}, or ask an operator to raise the limit (`kairos app limits "
            f"{app_id} --max-retries N`)",
        )
        self.asked = asked
        self.limit = limit


class TriggerBusyError(KairosError):
    """A manual trigger found no free trigger time for its execution; nothing was written."""

    def __init__(self, job_id: int) -> None:
        super().__init__(
            f"job {job_id} is being triggered by hand too often at once to give this trigger "
            "a trigger time of its own; nothing was written, try again"
        )
        self.job_id = job_id


class BackfillTooLargeError(ValidationFailedError):
    """A backfill range holding more trigger times than ``KAIROS_BACKFILL_MAX_RUNS``
    allows in one call; nothing was written."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            "from",
            f"the range holds more than {limit} trigger times, the most one backfill may run "
            "(KAIROS_BACKFILL_MAX_RUNS); send a shorter range, or split it into several "
            "calls (times already run are never run again)",
        )
        self.limit = limit


class CallbackUrlRefusedError(ValidationFailedError):
    """A callback URL the callback URL policy refuses (``common.callback_urls``): its
    scheme, a user:password part, or an address it reaches. Refused at submission (a
    422 naming ``callbackUrl``) and again before each send."""

    def __init__(self, url: str, reason: str) -> None:
        shown = url if len(url) <= 80 else url[:77] + "..."
        super().__init__("callbackUrl", f"{shown!r} {reason}")
        self.url = url
        self.reason = reason


class CallbackAddressRefusedError(CallbackUrlRefusedError):
    """A callback URL whose host is, or resolves to, an address callbacks may not reach
    (loopback, private, link-local, ...) and no allowed network admits.

    The message names the address only when the URL itself holds it: the address a name
    resolved to stays out of it (and so out of the 422 and the delivery's attempts), or
    an app could map the operator's internal names through Kairos. ``address`` keeps it
    for the logs.
    """

    def __init__(self, url: str, host: str, address: str, kind: str, literal: bool) -> None:
        reached = f"{address}," if literal else f"host {host!r}, which resolves to"
        cidr = f"{address}/{32 if '.' in address else 128}" if literal else "CIDR"
        super().__init__(
            url,
            f"names {reached} {kind}; callbacks go to public addresses only. To call a "
            "receiver on your own network, an operator allows its network for this app "
            f"(`kairos app networks APP_ID --allow {cidr}`; KAIROS_CALLBACK_ALLOWED_NETWORKS "
            "is the default for apps without a list of their own)",
        )
        self.host = host
        self.address = address
        self.kind = kind


class CallbackHostUnresolvedError(CallbackUrlRefusedError):
    """A callback URL whose host could not be resolved (no such name, no address, or no
    answer in time), so no address of it could be checked."""

    def __init__(self, url: str, host: str, detail: str) -> None:
        super().__init__(
            url, f"names host {host!r}, which did not resolve ({detail}); check the host name"
        )
        self.host = host


class CallbackRequestError(KairosError):
    """A callback request that cannot be written as HTTP/1.1 (a header holding a line
    break): nothing is sent."""


class CallbackAnswerError(KairosError):
    """A receiver's answer to a callback that cannot be read as HTTP/1.1: the connection
    closed before it or inside it, or what came is not HTTP. ``before_answer``: not one
    byte of an answer came (a kept-alive connection the receiver had closed)."""

    def __init__(self, detail: str, before_answer: bool = False) -> None:
        super().__init__(detail)
        self.before_answer = before_answer


class WorkerIdInUseError(KairosError):
    """A worker was started under the id of a worker process that is running now."""

    def __init__(self, worker_id: str, where: str, age_ms: int) -> None:
        super().__init__(
            f"worker {worker_id!r} is already running ({where}, heartbeat {age_ms / 1000:.0f} s "
            "ago, consuming its queue): give this worker another --id (KAIROS_WORKER_ID), or "
            "stop that one first (after `make run`, its stack already runs workers)"
        )
        self.worker_id = worker_id


class PortInUseError(KairosError):
    """``kairos up`` was asked for an API port another program holds."""

    def __init__(self, port: int) -> None:
        super().__init__(
            f"port {port} is in use: another stack? use --port (KAIROS_PORT), e.g. "
            f"--port {port + 1}, or stop what holds it"
        )
        self.port = port


class AppNameTakenError(KairosError):
    """An app was created under the name of an app that exists."""

    def __init__(self, name: str, app_ids: Sequence[str]) -> None:
        super().__init__(
            f"an app named {name!r} exists already ({', '.join(app_ids)}): pick another name, "
            "or use that app (`kairos app list`; `kairos app rotate-key APP_ID` gives it a "
            "new key)"
        )
        self.name = name
        self.app_ids = list(app_ids)
