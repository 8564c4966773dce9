"""Reading the dispatcher's rows by column name: SQLAlchemy rows against ``driver.fetch``.

The claim, fire and results paths read a dozen columns by name from each of thousands
of rows a second. This times the results path's read of job settings
(``trigger_settings``'s statement over N rows, read into the same tuples) two ways,
interleaved in one process: SQLAlchemy ``Row`` objects read by attribute, and the named
tuples ``common.db.driver.fetch`` returns. It prints the median CPU microseconds per row
of each (this thread's CPU time, which other work on the box moves far less than a
wall clock), fetch and read apart, and their ratio.

    .venv/bin/python bench/row_reads.py --rows 5000 --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from harness import log

from common.config import StoreSettings
from common.db import driver

# The columns ``trigger_settings`` reads, from a sequence of N rows (MariaDB's
# ``seq_1_to_N`` table), so that no fixture has to be written.
SQL = (
    "SELECT seq AS id, 2 AS app_pk, 'WAITING' AS status, NULL AS cron_expr, "
    "NULL AS fixed_rate_seconds, NULL AS next_trigger_time, 'http://127.0.0.1/cb' AS "
    "callback_url, 3 AS max_retries, 4 AS retry_backoff_seconds, 60 AS "
    "retry_backoff_max_seconds, 'app_bench' AS app_id FROM mysql.seq_1_to_{rows}"
)


def read(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Read every column by name, as ``trigger_settings`` does."""
    return [
        (
            int(r.id),
            int(r.app_pk),
            str(r.status),
            r.cron_expr is not None or r.fixed_rate_seconds is not None,
            r.next_trigger_time is not None,
            r.callback_url,
            int(r.max_retries),
            int(r.retry_backoff_seconds),
            int(r.retry_backoff_max_seconds),
            str(r.app_id),
        )
        for r in rows
    ]


def timed(fetch: Callable[[], Sequence[Any]], count: int) -> tuple[float, float]:
    """(fetch, read) CPU microseconds per row."""
    began = time.thread_time()
    rows = fetch()
    fetched = time.thread_time()
    read(rows)
    ended = time.thread_time()
    return (fetched - began) / count * 1e6, (ended - fetched) / count * 1e6


def main() -> int:
    """Time both ways in turn and print the medians."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    engine = sa.create_engine(StoreSettings().database_url)
    sql = SQL.format(rows=args.rows)
    figures: dict[str, list[tuple[float, float]]] = {"sqlalchemy rows": [], "driver.fetch": []}
    with engine.connect() as conn:
        ways: dict[str, Callable[[], Sequence[Any]]] = {
            "sqlalchemy rows": lambda: conn.exec_driver_sql(sql).all(),
            "driver.fetch": lambda: driver.fetch(conn, sql),
        }
        for round_ in range(args.rounds):
            order = list(ways) if round_ % 2 == 0 else list(reversed(ways))
            for name in order:
                figures[name].append(timed(ways[name], args.rows))
    medians = {}
    for name, runs in figures.items():
        fetch_us = statistics.median(f for f, _ in runs)
        read_us = statistics.median(r for _, r in runs)
        medians[name] = fetch_us + read_us
        log(f"{name}: fetch {fetch_us:.2f} us/row, read {read_us:.2f} us/row")
    ratio = medians["driver.fetch"] / medians["sqlalchemy rows"]
    print(f"{args.rows} rows x {args.rounds} rounds: driver.fetch / sqlalchemy rows = {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
