"""Scheduling semantics: time zones, misfire and overlap policies, retries, timeouts,
scheduled executions (precise firing, retries, manual triggers), soft delete.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_JOB_COLUMNS: list[sa.Column[Any]] = [
    sa.Column("timezone", sa.String(64), nullable=False, server_default="UTC"),
    sa.Column("fixed_rate_seconds", sa.Integer, nullable=True),
    sa.Column("misfire_policy", sa.String(16), nullable=False, server_default="FIRE_ONCE"),
    sa.Column("misfire_threshold_seconds", sa.Integer, nullable=False, server_default="60"),
    sa.Column("catch_up_window_seconds", sa.Integer, nullable=False, server_default="3600"),
    sa.Column("overlap_policy", sa.String(8), nullable=False, server_default="FORBID"),
    sa.Column("max_retries", sa.Integer, nullable=False, server_default="0"),
    sa.Column("retry_backoff_seconds", sa.Integer, nullable=False, server_default="10"),
    sa.Column("retry_backoff_max_seconds", sa.Integer, nullable=False, server_default="3600"),
    sa.Column("timeout_seconds", sa.Integer, nullable=True),
    sa.Column("deleted_at", sa.BigInteger, nullable=True),
]


def upgrade() -> None:
    """Add the policy columns to jobs and the schedule time to executions."""
    for column in _JOB_COLUMNS:
        op.add_column("jobs", column)
    op.create_index("ix_jobs_app_id_id", "jobs", ["app_id", "id"])
    op.add_column("executions", sa.Column("scheduled_at", sa.BigInteger, nullable=True))
    op.add_column(
        "executions", sa.Column("manual", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.drop_index("ix_executions_status_created", "executions")
    op.create_index("ix_executions_status_scheduled", "executions", ["status", "scheduled_at"])
    op.create_index("ix_executions_status_dispatched", "executions", ["status", "dispatched_at"])


def downgrade() -> None:
    """Remove what upgrade added."""
    op.drop_index("ix_executions_status_dispatched", "executions")
    op.drop_index("ix_executions_status_scheduled", "executions")
    op.create_index("ix_executions_status_created", "executions", ["status", "created_at"])
    op.drop_column("executions", "manual")
    op.drop_column("executions", "scheduled_at")
    op.drop_index("ix_jobs_app_id_id", "jobs")
    for column in reversed(_JOB_COLUMNS):
        op.drop_column("jobs", column.name)
