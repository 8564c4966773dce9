"""A per-app bound on retries.

``apps`` gains ``max_retries``: the most retries a job of the app may ask for, and the
most the dispatcher gives a failed run of it (default 100, the most a job may ask for),
so that one failing trigger cannot make more executions than an operator allows.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

COLUMN = "max_retries"


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("apps")}


def upgrade() -> None:
    """Add the column (unless a first run cut short added it already)."""
    if COLUMN not in _columns():
        op.add_column("apps", sa.Column(COLUMN, sa.Integer, nullable=False, server_default="100"))


def downgrade() -> None:
    """Drop the column."""
    if COLUMN in _columns():
        op.drop_column("apps", COLUMN)
