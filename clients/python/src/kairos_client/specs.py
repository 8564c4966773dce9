"""What a client sends: a job to create (``JobSpec``) and changes to a job
(``JobChanges``), with snake_case fields that map one to one onto the API's names."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from enum import Enum
from typing import Any

from kairos_client.enums import DependOn, MisfirePolicy, OverlapPolicy

TriggerTime = datetime | str | int
"""A trigger time: a datetime (without tzinfo it is a wall time in the job's timezone),
ISO 8601 text, or epoch milliseconds."""


class Unset(Enum):
    """The type of ``UNSET``: a field of ``JobChanges`` left out of the PATCH."""

    UNSET = "UNSET"


UNSET = Unset.UNSET


def camel(name: str) -> str:
    """The API's name for a snake_case field (``cron_expr`` -> ``cronExpr``)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class After:
    """A parent job: each run of the job waits until the parent's matching run ended
    as ``on`` says (the README's "Job dependencies")."""

    job_id: int
    on: DependOn | str = DependOn.SUCCEEDED

    def to_json(self) -> dict[str, Any]:
        """The ``after`` item as the API takes it."""
        return {"jobId": self.job_id, "on": _json_value(self.on)}


def _json_value(value: Any) -> Any:
    if isinstance(value, After):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Enum):
        return value.value
    return value


@dataclass(frozen=True)
class JobSpec:
    """A job to create: one-shot at ``trigger_at`` (now when None), cron
    (``cron_expr``) or fixed rate. None leaves a field to the server's default; the
    README's "Using the API" says what each field means and its limits."""

    job_name: str
    job_handler: str
    params: dict[str, Any] | None = None
    cron_expr: str | None = None
    trigger_at: TriggerTime | None = None
    timezone: str | None = None
    fixed_rate_seconds: int | None = None
    callback_url: str | None = None
    client_request_id: str | None = None
    misfire_policy: MisfirePolicy | str | None = None
    misfire_threshold_seconds: int | None = None
    catch_up_window_seconds: int | None = None
    overlap_policy: OverlapPolicy | str | None = None
    max_retries: int | None = None
    retry_backoff_seconds: int | None = None
    retry_backoff_max_seconds: int | None = None
    timeout_seconds: int | None = None
    priority: int | None = None
    jitter_seconds: int | None = None
    after: Sequence[After] | None = None

    def to_json(self) -> dict[str, Any]:
        """The request body: every field that is not None, by its API name."""
        body = {camel(f.name): getattr(self, f.name) for f in fields(self)}
        return {name: _json_value(value) for name, value in body.items() if value is not None}


@dataclass(frozen=True)
class JobChanges:
    """Fields of a job to change (PATCH). A field left ``UNSET`` keeps its stored value;
    None clears ``cron_expr``, ``fixed_rate_seconds``, ``timeout_seconds`` or
    ``callback_url`` (the server refuses None for the others)."""

    job_name: str | Unset = UNSET
    params: dict[str, Any] | Unset = UNSET
    cron_expr: str | Unset | None = UNSET
    timezone: str | Unset = UNSET
    fixed_rate_seconds: int | Unset | None = UNSET
    callback_url: str | Unset | None = UNSET
    misfire_policy: MisfirePolicy | str | Unset = UNSET
    misfire_threshold_seconds: int | Unset = UNSET
    catch_up_window_seconds: int | Unset = UNSET
    overlap_policy: OverlapPolicy | str | Unset = UNSET
    max_retries: int | Unset = UNSET
    retry_backoff_seconds: int | Unset = UNSET
    retry_backoff_max_seconds: int | Unset = UNSET
    timeout_seconds: int | Unset | None = UNSET
    priority: int | Unset = UNSET
    jitter_seconds: int | Unset = UNSET
    # The job's parents, replacing those stored ([] removes them).
    after: Sequence[After] | Unset = UNSET

    def to_json(self) -> dict[str, Any]:
        """The PATCH body: every field that is not ``UNSET``, by its API name."""
        body = {camel(f.name): getattr(self, f.name) for f in fields(self)}
        return {name: _json_value(value) for name, value in body.items() if value is not UNSET}
