"""A W3C traceparent kept with each job, run and callback delivery.

A job submitted with a ``traceparent`` header keeps it (``jobs.traceparent``); each of
its runs carries the one it hands to its handler and its callback
(``executions.traceparent``), and each callback delivery the one its POSTs send
(``callback_deliveries.traceparent``). NULL: not traced.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

TABLES = ("jobs", "executions", "callback_deliveries")


def _has_column(table: str) -> bool:
    columns = sa.inspect(op.get_bind()).get_columns(table)
    return "traceparent" in {str(c["name"]) for c in columns}


def upgrade() -> None:
    """Add traceparent to jobs, executions and callback_deliveries (those still without)."""
    for table in TABLES:
        if not _has_column(table):
            op.execute(f"ALTER TABLE {table} ADD COLUMN traceparent VARCHAR(55) NULL")


def downgrade() -> None:
    """Drop the traceparent columns."""
    for table in TABLES:
        if _has_column(table):
            op.execute(f"ALTER TABLE {table} DROP COLUMN traceparent")
