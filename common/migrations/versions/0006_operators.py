"""Operators of the web console: their tokens (hashed) and their signed-in sessions.

Two new tables; no existing row changes. Going down drops both: every operator must be
created again, and every session ends.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create the operators and operator_sessions tables."""
    op.create_table(
        "operators",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "operator_sessions",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("session_hash", sa.String(64), nullable=False, unique=True),
        sa.Column(
            "operator_id",
            sa.BigInteger,
            sa.ForeignKey("operators.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("csrf_token", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger, nullable=False),
        sa.Column("expires_at", sa.BigInteger, nullable=False),
        sa.Index("ix_operator_sessions_expires", "expires_at"),
    )


def downgrade() -> None:
    """Remove what upgrade added."""
    op.drop_table("operator_sessions")
    op.drop_table("operators")
