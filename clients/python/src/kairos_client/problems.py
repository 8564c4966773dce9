"""RFC 9457 problem details as the Kairos API sends them with every error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kairos_client.enums import JobStatus, enum_or_text

# Members of a problem this client reads into fields; any other is an extension.
_KNOWN = frozenset(
    {"type", "title", "status", "detail", "instance", "errors", "jobId", "jobStatus", "executionId"}
)


@dataclass(frozen=True)
class FieldError:
    """One input a problem names: ``field`` (``jobs[3].cronExpr`` in a batch) and what
    is wrong with it; ``job_id`` when an idempotency key already names a job."""

    field: str
    message: str
    job_id: int | None = None


@dataclass(frozen=True)
class Problem:
    """A problem detail. Switch on ``type`` (``urn:kairos:problem:<name>``), which never
    changes; ``detail`` says what went wrong and what to do."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: tuple[FieldError, ...] = ()
    job_id: int | None = None
    job_status: JobStatus | str | None = None
    execution_id: str | None = None
    extensions: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any], status: int) -> Problem:
        """Read a problem body; members missing or of the wrong type get neutral values,
        since an error must be reported even when its body is not quite right."""
        job_status = body.get("jobStatus")
        return cls(
            type=_text(body.get("type")) or "about:blank",
            title=_text(body.get("title")) or "",
            status=body["status"] if isinstance(body.get("status"), int) else status,
            detail=_text(body.get("detail")) or "",
            instance=_text(body.get("instance")),
            errors=_field_errors(body.get("errors")),
            job_id=_integer(body.get("jobId")),
            job_status=enum_or_text(JobStatus, job_status) if isinstance(job_status, str) else None,
            execution_id=_text(body.get("executionId")),
            extensions={k: v for k, v in body.items() if k not in _KNOWN},
        )

    @classmethod
    def from_text(cls, status: int, reason: str, text: str) -> Problem:
        """A problem for an answer that is not a problem detail (a proxy's HTML page)."""
        return cls(type="about:blank", title=reason, status=status, detail=text[:500])


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _field_errors(value: Any) -> tuple[FieldError, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(
        FieldError(
            field=_text(item.get("field")) or "",
            message=_text(item.get("message")) or "",
            job_id=_integer(item.get("jobId")),
        )
        for item in value
        if isinstance(item, Mapping)
    )
