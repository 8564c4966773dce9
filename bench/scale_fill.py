"""Filling the jobs table fast for the scale benchmark: raw multi-row INSERTs."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from harness import log
from sqlalchemy.engine import Engine

from common.db.schema import apps

SPREAD_MS = 30 * 86_400_000
INSERT_COLUMNS = (
    "app_pk, job_name, handler, params, next_trigger_time, status, version, created_at, updated_at"
)


def app_pk(engine: Engine, app_id: str) -> int:
    """The primary key of the app created for the benchmark."""
    with engine.connect() as conn:
        query = sa.select(apps.c.id).where(apps.c.app_id == app_id)
        return int(conn.execute(query).scalar_one())


def values_sql(app: int, names: range, triggers: Sequence[int], now_ms: int) -> str:
    """The VALUES list of one multi-row INSERT; every value is an int or a fixed literal."""
    return ",".join(
        f"({app},'scale {i}','demo.noop','{{}}',{t},'WAITING',0,{now_ms},{now_ms})"
        for i, t in zip(names, triggers, strict=True)
    )


class FillProgress:
    """A progress line on stderr every 10% of the fill."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.started = time.monotonic()
        self.next_report = 0

    def __call__(self, done: int) -> None:
        if done < self.next_report and done < self.total:
            return
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        log(f"filled {done:,}/{self.total:,} rows in {elapsed:.1f} s ({rate:,.0f} rows/s)")
        self.next_report = done + max(1, self.total // 10)


def insert_jobs(
    engine: Engine,
    app: int,
    triggers: Sequence[int],
    rows: int,
    progress: Callable[[int], None] | None = None,
) -> None:
    """INSERT WAITING jobs due at ``triggers``, ``rows`` per statement, one commit each."""
    now_ms = int(time.time() * 1000)
    first = secrets.randbelow(1 << 30)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for start in range(0, len(triggers), rows):
            chunk = triggers[start : start + rows]
            names = range(first + start, first + start + len(chunk))
            values = values_sql(app, names, chunk, now_ms)
            cursor.execute(f"INSERT INTO jobs ({INSERT_COLUMNS}) VALUES {values}")
            raw.commit()
            if progress is not None:
                progress(start + len(chunk))
        cursor.close()
    finally:
        raw.close()


def fill(engine: Engine, app: int, count: int, rows: int, now_ms: int) -> float:
    """Insert ``count`` jobs spread over the next 30 days; the seconds it took."""
    rng = random.Random(20_261_130)
    triggers = [now_ms + rng.randrange(SPREAD_MS) for _ in range(count)]
    started = time.monotonic()
    insert_jobs(engine, app, triggers, rows, FillProgress(count))
    return time.monotonic() - started
