"""Initial schema: apps, jobs, executions, workers, callback deliveries.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_MS = sa.BigInteger


def upgrade() -> None:
    """Create every table of the first Kairos schema."""
    op.create_table(
        "apps",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("app_id", sa.String(40), nullable=False, unique=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("api_key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("signing_secret", sa.String(128), nullable=False),
        sa.Column("created_at", _MS, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("app_id", sa.BigInteger, sa.ForeignKey("apps.id"), nullable=False),
        sa.Column("job_name", sa.String(200), nullable=False),
        sa.Column("handler", sa.String(200), nullable=False),
        sa.Column("params", sa.Text, nullable=False),
        sa.Column("cron_expr", sa.String(200), nullable=True),
        sa.Column("next_trigger_time", _MS, nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("owner_worker", sa.String(64), nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("callback_url", sa.String(2048), nullable=True),
        sa.Column("client_request_id", sa.String(128), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("claim_token", sa.String(32), nullable=True),
        sa.Column("created_at", _MS, nullable=False),
        sa.Column("updated_at", _MS, nullable=False),
        sa.UniqueConstraint("app_id", "client_request_id", name="uq_jobs_app_client_request"),
    )
    op.create_index("ix_jobs_status_next_trigger", "jobs", ["status", "next_trigger_time"])
    op.create_table(
        "executions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("execution_id", sa.String(36), nullable=False, unique=True),
        sa.Column("job_id", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("trigger_time", _MS, nullable=False),
        sa.Column("worker_id", sa.String(64), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
        sa.Column("created_at", _MS, nullable=False),
        sa.Column("dispatched_at", _MS, nullable=True),
        sa.Column("started_at", _MS, nullable=True),
        sa.Column("ended_at", _MS, nullable=True),
        sa.UniqueConstraint(
            "job_id", "trigger_time", "attempt", name="uq_executions_trigger_attempt"
        ),
    )
    op.create_index("ix_executions_status_created", "executions", ["status", "created_at"])
    op.create_index("ix_executions_worker_status", "executions", ["worker_id", "status"])
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.String(64), primary_key=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("capacity", sa.Integer, nullable=False),
        sa.Column("active", sa.Integer, nullable=False),
        sa.Column("cpu_idle", sa.Integer, nullable=False),
        sa.Column("avg_ms", sa.Integer, nullable=False),
        sa.Column("handlers", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", _MS, nullable=False),
        sa.Column("last_heartbeat", _MS, nullable=False),
    )
    op.create_table(
        "callback_deliveries",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("delivery_id", sa.String(40), nullable=False, unique=True),
        sa.Column("execution_id", sa.String(36), nullable=False, unique=True),
        sa.Column("job_id", sa.BigInteger, sa.ForeignKey("jobs.id"), nullable=False),
        sa.Column("app_id", sa.BigInteger, sa.ForeignKey("apps.id"), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("last_status_code", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", _MS, nullable=False),
        sa.Column("updated_at", _MS, nullable=False),
        sa.Column("delivered_at", _MS, nullable=True),
    )
    op.create_index(
        "ix_callback_deliveries_status_updated", "callback_deliveries", ["status", "updated_at"]
    )


def downgrade() -> None:
    """Drop every table, children first."""
    for table in ("callback_deliveries", "workers", "executions", "jobs", "apps"):
        op.drop_table(table)
