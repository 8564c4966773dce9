"""Executions made by a backfill are marked as such.

``POST /openapi/jobs/{jobId}/backfill`` runs a recurring job's past trigger times that
have no execution. Those runs are manual (they never hold the job) and carry
``executions.backfill = 1``, so the API, the console and the CLI can tell them from
runs the schedule made and from ``.../trigger`` runs.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _columns() -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns("executions")}


def upgrade() -> None:
    """Add executions.backfill (again, if a first run was cut short)."""
    if "backfill" not in _columns():
        op.execute("ALTER TABLE executions ADD COLUMN backfill TINYINT(1) NOT NULL DEFAULT 0")


def downgrade() -> None:
    """Drop executions.backfill."""
    if "backfill" in _columns():
        op.execute("ALTER TABLE executions DROP COLUMN backfill")
