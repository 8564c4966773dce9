"""Per-run params of a trigger with params, and jitter on recurring jobs.

``executions.params`` holds the params a ``POST .../trigger`` with a body gave its run,
in place of the job's; NULL (every other run) means the job's params at dispatch, so
normal runs store and read nothing more. ``jobs.jitter_seconds`` delays each scheduled
trigger by an offset in [0, N) s fixed by the job and the trigger time; 0 is on time.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def _columns(table: str) -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    """Add executions.params and jobs.jitter_seconds (again, if a first run was cut short)."""
    if "params" not in _columns("executions"):
        op.execute("ALTER TABLE executions ADD COLUMN params MEDIUMTEXT NULL")
    if "jitter_seconds" not in _columns("jobs"):
        op.execute("ALTER TABLE jobs ADD COLUMN jitter_seconds INT NOT NULL DEFAULT 0")


def downgrade() -> None:
    """Drop executions.params and jobs.jitter_seconds."""
    if "params" in _columns("executions"):
        op.execute("ALTER TABLE executions DROP COLUMN params")
    if "jitter_seconds" in _columns("jobs"):
        op.execute("ALTER TABLE jobs DROP COLUMN jitter_seconds")
