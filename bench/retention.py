"""Retention: how fast the leader's pruning works off a backlog of old executions.

Fills a namespace of its own with N finished executions past the retention period,
then calls ``prune`` (one pass of the leader's retention thread) until all are gone,
and prints the rate while deleting.

    .venv/bin/python bench/retention.py --rows 200000

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import sqlalchemy as sa
from harness import scratch_engine

from common.db.apps import MySqlAppStore
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, insert_job
from common.db.workers import MySqlWorkerTransactions
from common.handler_patterns import EVERY_HANDLER
from common.states import ExecutionStatus
from services.dispatcher.upkeep.retention import BatchSize, prune

INSERT_ROWS = 5_000


class StoppedClock:
    """The cluster clock at one instant, past every row's retention."""

    def now_ms(self) -> int:
        return 10_000


def fill(engine: sa.Engine, rows: int) -> None:
    with engine.begin() as conn:
        MySqlAppStore(conn).create_app("bench", 0, EVERY_HANDLER)
        job = insert_job(conn, NewJob(1, "j", "demo.noop", {}, None, 0, None, None, None), 0)
        for first in range(0, rows, INSERT_ROWS):
            batch = [
                NewExecution(f"e{i}", job, i + 1, 100, 100, ExecutionStatus.SUCCEEDED)
                for i in range(first, min(rows, first + INSERT_ROWS))
            ]
            insert_executions(conn, batch, 100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    with scratch_engine("bench_retention_") as engine:
        fill(engine, args.rows)
        size, gone, passes = BatchSize(), 0, 0
        workers = MySqlWorkerTransactions(engine)
        began = time.monotonic()
        while gone < args.rows:
            gone += prune(engine, workers, StoppedClock(), 1_000, size=size)  # type: ignore[arg-type]
            passes += 1
        seconds = time.monotonic() - began
        figures = {"rows": args.rows, "passes": passes, "seconds": round(seconds, 2)}
        figures["rows_per_s"] = round(args.rows / seconds)
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
