"""Every error the client raises, under one root: ``KairosError``.

An answer of the API that is an error becomes an ``ApiError`` subclass chosen by its
status, carrying the problem detail; catch the class, or switch on ``problem.type``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairos_client.problems import Problem

if TYPE_CHECKING:
    from kairos_client.models import Job


class KairosError(Exception):
    """The root of every error this client raises."""


class ApiError(KairosError):
    """The API answered with an error status; ``problem`` says what and why."""

    def __init__(
        self, problem: Problem, request_id: str | None = None, retry_after: float | None = None
    ) -> None:
        self.problem = problem
        self.status = problem.status
        self.request_id = request_id
        self.retry_after = retry_after
        super().__init__(f"{problem.status} {problem.type}: {problem.detail or problem.title}")

    @property
    def type(self) -> str:
        """The problem type, ``urn:kairos:problem:<name>``: stable, switch on it."""
        return self.problem.type


class BadRequestError(ApiError):
    """400: a request HTTP itself refuses."""


class AuthenticationError(ApiError):
    """401: no API key, or one unknown, revoked or past its end."""


class PermissionDeniedError(ApiError):
    """403: the app is disabled, or may no longer use the job's handler."""


class NotFoundError(ApiError):
    """404: no such job or execution of the app (or no such path)."""


class ConflictError(ApiError):
    """409: the job's status refuses the action (``problem.job_status`` says which)."""


class PayloadTooLargeError(ApiError):
    """413: the body is over the server's limit."""


class UnprocessableEntityError(ApiError):
    """422: an input is invalid; ``problem.errors`` names each field at fault."""


class RateLimitError(ApiError):
    """429: over the app's rate limit, still so after the retries allowed."""


class InternalServerError(ApiError):
    """500 or another 5xx: report ``request_id`` to the operators."""


class ServiceUnavailableError(ApiError):
    """503: a store of the server did not answer, still so after the retries allowed."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
}


def api_error(
    problem: Problem, request_id: str | None, retry_after: float | None = None
) -> ApiError:
    """The ``ApiError`` subclass for the problem's status."""
    status = problem.status
    fallback = InternalServerError if status >= 500 else ApiError
    kind = _BY_STATUS.get(status, fallback)
    return kind(problem, request_id, retry_after)


class ConnectionFailedError(KairosError):
    """The API could not be reached (or stopped answering) after the retries allowed;
    the last ``httpx`` error is the ``__cause__``."""


class ResponseFormatError(KairosError):
    """A successful answer whose body this client cannot read (not the Kairos API?)."""


class WaitTimeoutError(KairosError):
    """``wait`` saw no finished status within its timeout; ``job`` is the last one read."""

    def __init__(self, job_id: int, timeout: float, job: Job) -> None:
        self.job_id = job_id
        self.job = job
        super().__init__(f"job {job_id} did not finish within {timeout} s (status {job.status})")


class WebhookVerificationError(KairosError):
    """A callback failed verification: a header missing or malformed, no signature
    matching any secret, or a timestamp outside the tolerance. Answer it 4xx."""
