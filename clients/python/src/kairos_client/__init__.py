"""kairos-client: the Kairos job scheduler's OpenAPI from Python, and a verifier for
its signed callbacks.

    from kairos_client import Client, JobSpec
    with Client("http://127.0.0.1:8000", api_key) as kairos:
        job_id = kairos.create_job(JobSpec("report", "demo.echo")).job_id
        job = kairos.wait(job_id, timeout=60)
"""

from kairos_client._version import VERSION as __version__
from kairos_client.async_client import AsyncClient
from kairos_client.callbacks import (
    EXECUTION_FINISHED,
    CallbackAttempt,
    CallbackDelivery,
    CallbackEvent,
)
from kairos_client.client import Client
from kairos_client.enums import (
    CallbackState,
    DependOn,
    ExecutionStatus,
    JobStatus,
    MisfirePolicy,
    OverlapPolicy,
)
from kairos_client.errors import (
    ApiError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    InternalServerError,
    KairosError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ResponseFormatError,
    ServiceUnavailableError,
    UnprocessableEntityError,
    WaitTimeoutError,
    WebhookVerificationError,
)
from kairos_client.models import (
    BackfillAccepted,
    BatchAccepted,
    Execution,
    Job,
    JobAccepted,
    JobPolicies,
    TriggerAccepted,
    WaitedFor,
)
from kairos_client.problems import FieldError, Problem
from kairos_client.retries import RetryPolicy
from kairos_client.run_logs import RunLogLine, RunLogPage
from kairos_client.specs import UNSET, After, JobChanges, JobSpec
from kairos_client.webhooks import sign_webhook, verify_webhook

__all__ = [
    "EXECUTION_FINISHED",
    "UNSET",
    "After",
    "ApiError",
    "AsyncClient",
    "AuthenticationError",
    "BackfillAccepted",
    "BadRequestError",
    "BatchAccepted",
    "CallbackAttempt",
    "CallbackDelivery",
    "CallbackEvent",
    "CallbackState",
    "Client",
    "ConflictError",
    "ConnectionFailedError",
    "DependOn",
    "Execution",
    "ExecutionStatus",
    "FieldError",
    "InternalServerError",
    "Job",
    "JobAccepted",
    "JobChanges",
    "JobPolicies",
    "JobSpec",
    "JobStatus",
    "KairosError",
    "MisfirePolicy",
    "NotFoundError",
    "OverlapPolicy",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Problem",
    "RateLimitError",
    "ResponseFormatError",
    "RetryPolicy",
    "RunLogLine",
    "RunLogPage",
    "ServiceUnavailableError",
    "TriggerAccepted",
    "UnprocessableEntityError",
    "WaitTimeoutError",
    "WaitedFor",
    "WebhookVerificationError",
    "__version__",
    "sign_webhook",
    "verify_webhook",
]
