"""Reading the executions a dispatch message carries, and packing the unstarted rest."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from common.jsontext import json_elements, json_members
from common.messages import DispatchMessage, DispatchPack

log = logging.getLogger(__name__)


# How much of a validation error an unreadable execution's FAILED result carries.
MAX_ERROR = 2_000


@dataclass(frozen=True)
class Unreadable:
    """An execution in a dispatch message that this worker cannot read, by its identity.

    It is reported FAILED with ``error`` (see ``ExecutionRunner.execute``) rather than
    dropped: its row would stay QUEUED, and a FORBID job would wait on it for good.
    ``raw`` is its JSON text as it came, so it travels again unchanged.
    """

    execution_id: str
    job_id: int
    ref: int | None
    error: str
    raw: str


Unit = DispatchMessage | Unreadable


class DispatchPacking:
    """The packing of a worker queue: a message is a ``DispatchPack`` of executions."""

    def unpack(self, body: bytes) -> Sequence[Unit]:
        """The executions in a dispatch body.

        When the body does not read as a whole, each execution is read on its own: one
        that cannot be read (from a newer dispatcher, damaged, or with params nested
        deeper than the JSON reader goes or holding a lone surrogate) becomes
        ``Unreadable`` if its id, job and execution key can still be read, and is skipped
        (logged) if not; the others run. Raises ``ValueError`` (a ``ValidationError``)
        when not one execution can be named.
        """
        try:
            return DispatchPack.model_validate_json(body).executions
        except ValidationError as whole:
            units = _one_by_one(body)
            if not units:
                raise whole from None
            return units

    def repack(self, units: Sequence[Unit]) -> bytes:
        """One message carrying ``units`` (unreadable ones as they came)."""
        items = [u.raw if isinstance(u, Unreadable) else u.model_dump_json() for u in units]
        return ('{"v":1,"executions":[' + ",".join(items) + "]}").encode()


def _one_by_one(body: bytes) -> list[Unit]:
    """Each execution of the body read on its own. The body is split by counting brackets,
    not parsed: a parse recurses, and one deeply nested item would fail them all."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return []
    members = json_members(text)
    if members is None or "executions" not in members:
        return []
    items = json_elements(members["executions"]) or []
    units: list[Unit] = []
    for item in items:
        unit = _read(item)
        if unit is None:
            log.error("skipping an execution that names no execution id and job: %.500s", item)
        else:
            units.append(unit)
    return units


def _read(item: str) -> Unit | None:
    try:
        return DispatchMessage.model_validate_json(item)
    except ValidationError as e:
        return _identify(item, _reason(e))


def _reason(error: ValidationError) -> str:
    parts = []
    for detail in error.errors(include_url=False):
        where = ".".join(str(part) for part in detail["loc"])
        parts.append(f"{where}: {detail['msg']}" if where else str(detail["msg"]))
    return "; ".join(parts)[:MAX_ERROR]


def _identify(item: str, error: str) -> Unreadable | None:
    members = json_members(item)
    if members is None:
        return None
    execution_id = _small_value(members.get("execution_id"))
    job_id, ref = _small_value(members.get("job_id")), _small_value(members.get("ref"))
    if not isinstance(execution_id, str) or type(job_id) is not int:
        return None
    return Unreadable(execution_id, job_id, ref if type(ref) is int else None, error, item)


def _small_value(raw: str | None) -> Any:
    """A short JSON value parsed, or None (absent, too long to be an id, or not JSON)."""
    if raw is None or len(raw) > 200:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def handler_of(unit: Unit) -> str | None:
    """The handler an execution runs, for its run time per handler; None when unreadable."""
    return unit.handler if isinstance(unit, DispatchMessage) else None
