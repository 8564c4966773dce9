"""``kairos executions stuck``: the table and the JSON, by the CLI's one convention
(a line that says nothing matched; ``{"executions": [...]}``)."""

from __future__ import annotations

import argparse

from services.cli.render import Column, print_json, print_table

STUCK_COLUMNS = (
    Column("EXECUTION", "id"),
    Column("JOB", "id"),
    Column("TRY", "num", keep=3),
    Column("STATUS", keep=9),
    Column("WORKER", keep=5),
    Column("AGE_S", "num", keep=6),
    Column("RUN", keep=8),
    Column("HANDLER", "text", keep=2),
)


def stuck_rows(rows: list[dict[str, object]]) -> list[list[str]]:
    """The cells of ``stuck_executions``' rows, in ``STUCK_COLUMNS``' order."""
    return [
        [
            str(r["executionId"]),
            str(r["jobId"]),
            str(r["attempt"]),
            str(r["status"]),
            str(r["workerId"] or "-"),
            str(r["ageSeconds"]),
            str(r["run"]),
            str(r["handler"]),
        ]
        for r in rows
    ]


def cmd_executions_stuck(args: argparse.Namespace) -> int:
    """List executions QUEUED or overdue SCHEDULED for longer than --older-than."""
    from common.config import StoreSettings
    from services.api.operator.commands import stuck_executions

    rows = stuck_executions(StoreSettings(), int(args.older_than * 1000))
    if args.output == "json":
        print_json({"executions": rows})
        return 0
    empty = f"no execution QUEUED, or SCHEDULED past due, for longer than {args.older_than:g} s"
    print_table(STUCK_COLUMNS, stuck_rows(rows), empty)
    return 0
