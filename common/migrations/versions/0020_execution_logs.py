"""Run logs: the lines a handler writes while it runs, kept with its execution.

``execution_logs`` holds one row per line, keyed by (execution_id, seq): the worker
writes a running run's lines every second or so, the API pages them by seq, and the
retention sweep deletes them with their execution.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import MEDIUMTEXT

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def upgrade() -> None:
    """Create execution_logs (unless a first run cut short made it already)."""
    if "execution_logs" in _tables():
        return
    op.create_table(
        "execution_logs",
        sa.Column("execution_id", sa.String(36), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("level", sa.String(8), nullable=False),
        sa.Column("line", MEDIUMTEXT, nullable=False),
    )


def downgrade() -> None:
    """Drop execution_logs."""
    if "execution_logs" in _tables():
        op.drop_table("execution_logs")
