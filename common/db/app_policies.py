"""What the dispatcher needs of each app to share slots and keep its fences: weight, cap,
whether it is disabled and which handlers it may call."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from common.db.records import MOST_RETRIES
from common.db.schema import apps, executions, jobs
from common.handler_patterns import EVERY_HANDLER, HandlerPatterns
from common.states import ExecutionStatus


@dataclass(frozen=True)
class AppPolicy:
    """An app's share of the slots (``weight``), the most runs it may have going at once
    (``max_running``, None for no cap), the most retries a failed run of its gets
    (``max_retries``) and its fences as dispatch applies them."""

    app_id: str = ""
    weight: int = 1
    max_running: int | None = None
    disabled: bool = False
    handlers: HandlerPatterns = EVERY_HANDLER
    max_retries: int = MOST_RETRIES


# An app the dispatcher has no row for (created since it last read them): the defaults.
DEFAULT_POLICY = AppPolicy()


def read_app_policies(conn: Connection) -> dict[int, AppPolicy]:
    """Every app's policy, by primary key."""
    rows = conn.execute(
        sa.select(
            apps.c.id,
            apps.c.app_id,
            apps.c.weight,
            apps.c.max_running,
            apps.c.disabled_at,
            apps.c.handler_patterns,
            apps.c.max_retries,
        )
    ).all()
    return {
        int(row.id): AppPolicy(
            app_id=str(row.app_id),
            weight=max(1, int(row.weight)),
            max_running=None if row.max_running is None else int(row.max_running),
            disabled=row.disabled_at is not None,
            handlers=HandlerPatterns.from_stored(row.handler_patterns),
            max_retries=int(row.max_retries),
        )
        for row in rows
    }


def running_by_app(conn: Connection) -> dict[int, int]:
    """How many runs each app has going (QUEUED: in a worker's queue or running)."""
    rows = conn.execute(
        sa.select(jobs.c.app_pk, sa.func.count())
        .select_from(executions.join(jobs, jobs.c.id == executions.c.job_id))
        .where(executions.c.status == ExecutionStatus.QUEUED)
        .group_by(jobs.c.app_pk)
    ).all()
    return {int(app): int(count) for app, count in rows}
