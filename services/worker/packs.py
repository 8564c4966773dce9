"""Reading the executions a dispatch message carries, and packing the unstarted rest."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from common.messages import DispatchBatch, DispatchMessage

log = logging.getLogger(__name__)

_DISPATCH = TypeAdapter(DispatchBatch | DispatchMessage)

# How much of a validation error an unreadable execution's FAILED result carries.
MAX_ERROR = 2_000


@dataclass(frozen=True)
class Unreadable:
    """An execution in a dispatch message that this worker cannot read, by its identity.

    It is reported FAILED with ``error`` (see ``ExecutionRunner.execute``) rather than
    dropped: its row would stay QUEUED, and a FORBID job would wait on it for good.
    """

    execution_id: str
    job_id: int
    ref: int | None
    error: str
    raw: Any


Unit = DispatchMessage | Unreadable


class DispatchPacking:
    """The packing of a worker queue: a message carries one execution or a batch."""

    def unpack(self, body: bytes) -> Sequence[Unit]:
        """The executions in a dispatch body.

        When the body does not read as a whole, each execution is read on its own: one
        from a newer dispatcher (or damaged) becomes ``Unreadable`` if its id, job and
        row key can still be read, and is skipped (logged) if not. Raises
        ``ValueError`` (a ``ValidationError``) when not one execution can be named.
        """
        try:
            message = _DISPATCH.validate_json(body)
        except ValidationError as whole:
            units = _one_by_one(body)
            if not units:
                raise whole from None
            return units
        if isinstance(message, DispatchBatch):
            return message.executions
        return (message,)

    def repack(self, units: Sequence[Unit]) -> bytes:
        """One message carrying ``units`` (unreadable ones as they came)."""
        items = [u.raw if isinstance(u, Unreadable) else u.model_dump(mode="json") for u in units]
        return json.dumps({"v": 1, "executions": items}, separators=(",", ":")).encode()


def _one_by_one(body: bytes) -> list[Unit]:
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("executions", [data]) if isinstance(data, dict) else []
    units: list[Unit] = []
    for item in items if isinstance(items, list) else []:
        try:
            units.append(DispatchMessage.model_validate(item))
        except ValidationError as e:
            unreadable = _identify(item, str(e)[:MAX_ERROR])
            if unreadable is None:
                log.error("skipping an execution that names no execution id and job: %.500r", item)
            else:
                units.append(unreadable)
    return units


def _identify(item: Any, error: str) -> Unreadable | None:
    if not isinstance(item, dict):
        return None
    execution_id, job_id, ref = item.get("execution_id"), item.get("job_id"), item.get("ref")
    if not isinstance(execution_id, str) or type(job_id) is not int:
        return None
    return Unreadable(execution_id, job_id, ref if type(ref) is int else None, error, item)
