"""What an operator grants each app, and a priority on each job.

``apps`` gains its share of the cluster (``weight``, default 1; ``max_running``, the
most runs it may have going at once, NULL for no cap), its quotas (``max_jobs``, the
most jobs it may keep stored; ``min_cron_interval_seconds``, the shortest interval a
schedule of its may have) and ``callback_networks``, a JSON array of the CIDRs its
callbacks may reach although they are not public (NULL: the cluster's default).
``jobs`` gains ``priority`` (0-9, higher first within its app, default 5).
``operator_sessions`` gains ``last_seen_at``, so an idle console session ends.

MySQL commits each DDL statement on its own: every step can run again, so a migration
cut short is completed by running it again.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def _new_columns() -> tuple[tuple[str, sa.Column[object]], ...]:
    """The columns to add, made anew for each use (a Column belongs to one table)."""
    return (
        ("apps", sa.Column("weight", sa.Integer, nullable=False, server_default="1")),
        ("apps", sa.Column("max_running", sa.Integer, nullable=True)),
        ("apps", sa.Column("max_jobs", sa.Integer, nullable=True)),
        ("apps", sa.Column("min_cron_interval_seconds", sa.Integer, nullable=True)),
        ("apps", sa.Column("callback_networks", sa.Text, nullable=True)),
        ("jobs", sa.Column("priority", sa.SmallInteger, nullable=False, server_default="5")),
        ("operator_sessions", sa.Column("last_seen_at", sa.BigInteger, nullable=True)),
    )


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    """Add the columns that are missing."""
    for table, column in _new_columns():
        if column.name not in _columns(table):
            op.add_column(table, column)


def downgrade() -> None:
    """Remove what upgrade added."""
    for table, column in reversed(_new_columns()):
        if column.name in _columns(table):
            op.drop_column(table, column.name)
