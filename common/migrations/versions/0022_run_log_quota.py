"""A per-app quota on run logs.

``apps`` gains ``run_log_bytes_per_hour``: the bytes of run-log text the app's runs may
store in an hour (NULL: no quota). Workers keep each app's count in Redis and drop what
passes it, with one line per run saying so.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

COLUMN = "run_log_bytes_per_hour"


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("apps")}


def upgrade() -> None:
    """Add the column (unless a first run cut short added it already)."""
    if COLUMN not in _columns():
        op.add_column("apps", sa.Column(COLUMN, sa.BigInteger, nullable=True))


def downgrade() -> None:
    """Drop the column."""
    if COLUMN in _columns():
        op.drop_column("apps", COLUMN)
