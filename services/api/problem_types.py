"""The problem types of the API: a stable URI per kind of error, for clients to switch on.

Each ``type`` is a URN that never changes once published (README, "Problem types");
``title`` is its short human summary. A new kind of error gets a new entry here, never
a changed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

_PREFIX = "urn:kairos:problem:"


@dataclass(frozen=True)
class ProblemKind:
    """One kind of problem: its HTTP status, its type URI and its title."""

    status: int
    name: str
    title: str

    @property
    def uri(self) -> str:
        """The stable ``type`` member of the problem: ``urn:kairos:problem:<name>``."""
        return _PREFIX + self.name


class ProblemType(Enum):
    """Every problem the API answers with, by what went wrong."""

    BAD_REQUEST = ProblemKind(400, "bad-request", "Bad request")
    UNAUTHORIZED = ProblemKind(401, "unauthorized", "Missing, unknown or revoked API key")
    APP_DISABLED = ProblemKind(403, "app-disabled", "App disabled")
    HANDLER_FORBIDDEN = ProblemKind(403, "handler-forbidden", "Handler not allowed")
    NOT_FOUND = ProblemKind(404, "not-found", "No such resource")
    JOB_NOT_FOUND = ProblemKind(404, "job-not-found", "Job not found")
    EXECUTION_NOT_FOUND = ProblemKind(404, "execution-not-found", "Execution not found")
    CALLBACK_NOT_FOUND = ProblemKind(404, "callback-not-found", "Callback delivery not found")
    METHOD_NOT_ALLOWED = ProblemKind(405, "method-not-allowed", "Method not allowed")
    INVALID_TRANSITION = ProblemKind(409, "invalid-transition", "Invalid transition")
    TRIGGER_BUSY = ProblemKind(409, "trigger-busy", "Trigger time taken")
    CALLBACK_IN_FLIGHT = ProblemKind(409, "callback-in-flight", "Callback still on its way")
    IDEMPOTENCY_KEY_IN_USE = ProblemKind(
        409, "idempotency-key-in-use", "A request with this Idempotency-Key is in progress"
    )
    BODY_TOO_LARGE = ProblemKind(413, "body-too-large", "Request body too large")
    VALIDATION_FAILED = ProblemKind(422, "validation-failed", "Invalid request")
    UNKNOWN_HANDLER = ProblemKind(422, "unknown-handler", "Unknown handler")
    HANDLER_NOT_ALLOWED = ProblemKind(422, "handler-not-allowed", "Handler not allowed")
    SCHEDULE_TOO_FREQUENT = ProblemKind(
        422, "schedule-too-frequent", "Schedule more frequent than the app's quota"
    )
    RETRIES_OVER_LIMIT = ProblemKind(422, "retries-over-limit", "More retries than the app's limit")
    BATCH_REJECTED = ProblemKind(422, "batch-rejected", "Invalid batch; nothing was written")
    IDEMPOTENCY_CONFLICT = ProblemKind(
        422, "idempotency-conflict", "Idempotency key reused with a different request"
    )
    RATE_LIMITED = ProblemKind(429, "rate-limited", "Too many requests")
    AUTH_THROTTLED = ProblemKind(
        429, "auth-throttled", "Too many failed authentications from this address"
    )
    JOB_QUOTA_EXCEEDED = ProblemKind(429, "job-quota-exceeded", "The app's job quota is full")
    INTERNAL_ERROR = ProblemKind(500, "internal-error", "Internal error")
    STORE_UNAVAILABLE = ProblemKind(503, "store-unavailable", "A store is unavailable")

    @property
    def kind(self) -> ProblemKind:
        """The status, URI and title of this problem type."""
        value: ProblemKind = self.value
        return value


def for_status(status: int) -> ProblemType:
    """The generic problem type of an HTTP error status (Starlette's own errors)."""
    for problem_type in ProblemType:
        if problem_type.kind.status == status:
            return problem_type
    return ProblemType.BAD_REQUEST if status < 500 else ProblemType.INTERNAL_ERROR
