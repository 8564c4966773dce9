"""Reading the API's JSON into typed values, with an error that names the field."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from kairos_client.enums import enum_or_text
from kairos_client.errors import ResponseFormatError

E = TypeVar("E", bound=StrEnum)


class Reader:
    """One JSON object of an answer; each getter checks the member's type."""

    def __init__(self, body: Any, what: str) -> None:
        if not isinstance(body, Mapping):
            raise ResponseFormatError(f"{what}: expected a JSON object, got {type(body).__name__}")
        self.body: Mapping[str, Any] = body
        self.what = what

    def _fail(self, name: str, expected: str, value: Any = None) -> ResponseFormatError:
        value = self.body.get(name) if value is None else value
        return ResponseFormatError(f"{self.what}.{name}: expected {expected}, got {value!r}")

    def text(self, name: str) -> str:
        """A required string."""
        value = self.body.get(name)
        if not isinstance(value, str):
            raise self._fail(name, "a string")
        return value

    def text_or_none(self, name: str) -> str | None:
        """A string, or null / absent."""
        return None if self.body.get(name) is None else self.text(name)

    def identifier(self, name: str) -> str:
        """A required id, sent as a string or a whole number; always a string here."""
        value = self.body.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value:
            raise self._fail(name, "an id")
        return value

    def integer(self, name: str) -> int:
        """A required whole number."""
        value = self.body.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._fail(name, "an integer")
        return value

    def integer_or_none(self, name: str) -> int | None:
        """A whole number, or null / absent."""
        return None if self.body.get(name) is None else self.integer(name)

    def number_or_none(self, name: str) -> float | None:
        """A number, or null / absent."""
        value = self.body.get(name)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self._fail(name, "a number")
        return float(value)

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean; ``default`` when absent."""
        value = self.body.get(name, default)
        if not isinstance(value, bool):
            raise self._fail(name, "true or false")
        return value

    def time_or_none(self, name: str) -> datetime | None:
        """An ISO 8601 time (or epoch ms), or null / absent."""
        value = self.body.get(name)
        if value is None:
            return None
        parsed = parse_time(value)
        if parsed is None:
            raise self._fail(name, "an ISO 8601 date-time")
        return parsed

    def time(self, name: str) -> datetime:
        """A required ISO 8601 time (or epoch ms)."""
        parsed = self.time_or_none(name)
        if parsed is None:
            raise self._fail(name, "an ISO 8601 date-time")
        return parsed

    def times_or_none(self, name: str) -> list[datetime] | None:
        """An array of ISO 8601 times, or null / absent."""
        if self.body.get(name) is None:
            return None
        times = []
        for n, item in enumerate(self.items(name)):
            parsed = parse_time(item)
            if parsed is None:
                raise self._fail(f"{name}[{n}]", "an ISO 8601 date-time", item)
            times.append(parsed)
        return times

    def choice(self, name: str, kind: type[E]) -> E | str:
        """A required enum value (kept as text when this client does not know it)."""
        return enum_or_text(kind, self.text(name))

    def mapping(self, name: str) -> dict[str, Any]:
        """A JSON object; empty when null / absent."""
        value = self.body.get(name)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self._fail(name, "an object")
        return dict(value)

    def items(self, name: str) -> list[Any]:
        """A JSON array; empty when null / absent."""
        value = self.body.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._fail(name, "an array")
        return value

    def child(self, name: str) -> Reader | None:
        """A nested object as a reader, or None when null / absent."""
        value = self.body.get(name)
        return None if value is None else Reader(value, f"{self.what}.{name}")


def parse_time(value: Any) -> datetime | None:
    """An aware datetime from ISO 8601 text or epoch milliseconds; None if neither."""
    if isinstance(value, int) and not isinstance(value, bool):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
