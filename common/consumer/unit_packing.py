"""How a consumed message body carries its units of work, and how units travel again."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

U = TypeVar("U")


def unchanged(bodies: Sequence[bytes]) -> Sequence[bytes]:
    """The ``prepare`` step of a consumer whose ``run`` takes the raw bodies."""
    return bodies


class Packing(Protocol[U]):
    """How a message body carries its units of work, and how units travel again."""

    def unpack(self, body: bytes) -> Sequence[U]:
        """The units a body carries; raises if the body cannot be read."""

    def repack(self, units: Sequence[U]) -> bytes:
        """One body carrying ``units`` (the unstarted rest of a delivery)."""


class OnePerMessage:
    """The packing of a queue whose every message is one unit: its raw body."""

    def unpack(self, body: bytes) -> Sequence[bytes]:
        """The body itself."""
        return (body,)

    def repack(self, units: Sequence[bytes]) -> bytes:
        """Never needed: a one-unit delivery has no rest to send again."""
        (body,) = units
        return body


ONE_PER_MESSAGE = OnePerMessage()
