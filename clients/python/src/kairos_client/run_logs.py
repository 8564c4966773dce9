"""An execution's run log as the API answers it: the lines its handler logged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from kairos_client._reading import Reader
from kairos_client.enums import ExecutionStatus


@dataclass(frozen=True)
class RunLogLine:
    """One line a handler logged (``ctx.log``, or standard ``logging`` while it ran)."""

    seq: int
    at: datetime
    level: str
    line: str

    @classmethod
    def from_json(cls, body: Any, what: str = "run log line") -> RunLogLine:
        """Read a ``RunLogLine``."""
        r = Reader(body, what)
        return cls(
            seq=r.integer("seq"), at=r.time("at"), level=r.text("level"), line=r.text("line")
        )


@dataclass(frozen=True)
class RunLogPage:
    """Lines of one execution's log past ``after``; ``next_after`` is the ``after`` for
    the lines that follow; ``ended``: no line is added once a page comes back empty."""

    execution_id: str
    status: ExecutionStatus | str
    lines: list[RunLogLine]
    next_after: int
    ended: bool
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Any, what: str = "run log page") -> RunLogPage:
        """Read a ``RunLogPage``."""
        r = Reader(body, what)
        lines = [
            RunLogLine.from_json(item, f"{what}.lines[{n}]")
            for n, item in enumerate(r.items("lines"))
        ]
        return cls(
            execution_id=r.text("executionId"),
            status=r.choice("status", ExecutionStatus),
            lines=lines,
            next_after=r.integer("nextAfter"),
            ended=r.flag("ended"),
            raw=r.body,
        )
