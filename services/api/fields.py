"""Field types of the request bodies that JSON alone does not pin down.

JSON has no integer type and Python counts ``true`` as 1: without these, ``true`` was
taken as one second, or as 1970-01-01T00:00:00.001Z for ``triggerAt``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema


def _whole_number(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not true or false")
    return value


def _integer_only(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise ValueError("must be a whole number from 0 to 9, not text or true/false")
    return value


def _instant(value: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError(
        "must be ISO 8601 text or whole epoch milliseconds, e.g. "
        '"2026-11-30T14:00:00Z" or 1795960800000'
    )


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
"""An integer; ``true`` and ``false`` are refused (fractions are, as for any int)."""


PRIORITY_DESCRIPTION = (
    "0 (lowest) to 9 (highest): higher runs first among this app's waiting "
    "runs; it never takes another app's share; waiting runs gain priority with age"
)

Priority = Annotated[
    int,
    BeforeValidator(_integer_only),
    Field(ge=0, le=9, description=PRIORITY_DESCRIPTION),
]
"""A job's priority as a request gives it: 0 to 9; text (``"7"``) and booleans are
refused, as they are no JSON integer."""

ShownPriority = Annotated[
    int,
    WithJsonSchema(
        {"type": "integer", "minimum": 0, "maximum": 9, "description": PRIORITY_DESCRIPTION}
    ),
]
"""A job's priority as a read shows it: documented 0 to 9, the range the API takes,
but not checked, so a row changed by hand still renders instead of failing the read."""


_BOUNDS = MappingProxyType(
    {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}
)


def standard_bounds(schema: Any) -> None:
    """Rename the bounds pydantic leaves in its own words (``ge``, ``le``: an optional
    ``WholeNumber``, whose validator hides the integer) to JSON Schema's, in place."""
    if isinstance(schema, dict):
        for ours, standard in _BOUNDS.items():
            if ours in schema:
                schema[standard] = schema.pop(ours)
        for value in schema.values():
            standard_bounds(value)
    elif isinstance(schema, list):
        for item in schema:
            standard_bounds(item)


Instant = Annotated[str | int | None, BeforeValidator(_instant)]
"""ISO 8601 text or epoch milliseconds; booleans, fractions and other types refused."""

GivenInstant = Annotated[str | int, BeforeValidator(_instant)]
"""``Instant`` where a time must be given (null refused)."""

Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A time the API shows: ISO 8601 UTC with milliseconds (``2026-11-30T14:00:00.000Z``)."""

Uri = Annotated[str, WithJsonSchema({"type": "string", "format": "uri"})]
"""An absolute URI the API shows."""

CallbackUrl = Annotated[
    str,
    Field(max_length=2048),
    WithJsonSchema(
        {
            "type": "string",
            "format": "uri",
            "maxLength": 2048,
            "description": "absolute http:// or https:// URL the outcome is POSTed to; "
            "its host must be, and resolve only to, public addresses unless the server's "
            "KAIROS_CALLBACK_ALLOWED_NETWORKS admits them",
        }
    ),
]
"""A callback URL as a request gives it; ``validation`` checks the rest."""

ExecutionId = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
"""The public id of an execution, a UUID."""

DeliveryId = Annotated[str, WithJsonSchema({"type": "string", "pattern": "^msg_[0-9a-f]{32}$"})]
"""The id of a callback delivery (``msg_`` and 32 hex digits): its ``webhook-id``."""
