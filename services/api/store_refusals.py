"""When MySQL (or the driver) refuses the data of one job row: the 422 that names the
request field behind the refused column.

Validation refuses such input before it reaches MySQL; this is the last line, so that a
row that slips through fails its own request as a 422 instead of a 500 for a group.
Whether an error is the store's or a row's is ``common.store_errors.is_store_outage``.
"""

from __future__ import annotations

import re
from types import MappingProxyType

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError

from common.db.retry import is_duplicate_key
from common.errors import ValidationFailedError

# Job columns by the request field a client sets them with.
_FIELDS = MappingProxyType(
    {
        "job_name": "jobName",
        "handler": "jobHandler",
        "params": "params",
        "cron_expr": "cronExpr",
        "next_trigger_time": "triggerAt",
        "callback_url": "callbackUrl",
        "client_request_id": "clientRequestId",
        "timezone": "timezone",
        "fixed_rate_seconds": "fixedRateSeconds",
        "misfire_threshold_seconds": "misfireThresholdSeconds",
        "catch_up_window_seconds": "catchUpWindowSeconds",
        "max_retries": "maxRetries",
        "retry_backoff_seconds": "retryBackoffSeconds",
        "retry_backoff_max_seconds": "retryBackoffMaxSeconds",
        "timeout_seconds": "timeoutSeconds",
    }
)

_COLUMN = re.compile(r"column '([^']+)'")
_ROW = re.compile(r"at row (\d+)")


def _detail(error: BaseException) -> str:
    """MySQL's message, or the error's own text, with no character UTF-8 cannot carry."""
    args: tuple[object, ...] = getattr(getattr(error, "orig", None), "args", ())
    text = str(args[1]) if isinstance(error, DBAPIError) and len(args) > 1 else str(error)
    return text.encode("utf-8", "backslashreplace").decode()


def refused_row_number(error: BaseException) -> int | None:
    """The 1-based row of a multi-row statement that MySQL names in ``error``, if any."""
    found = _ROW.search(_detail(error))
    return int(found.group(1)) if found else None


def as_refusal(error: BaseException) -> ValidationFailedError | None:
    """The 422 for a row MySQL (or the driver) refused for its data, else None.

    A duplicate key is not a refusal of the data: callers settle it as a retry.
    """
    if isinstance(error, IntegrityError) and is_duplicate_key(error):
        return None
    if not isinstance(error, DataError | IntegrityError | UnicodeError):
        return None
    detail = _detail(error)
    column = _COLUMN.search(detail)
    field = _FIELDS.get(column.group(1), "body") if column else "body"
    return ValidationFailedError(
        field, f"Kairos cannot store this value ({detail}); send a value within the limits"
    )
