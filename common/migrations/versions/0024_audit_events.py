"""The audit trail: audit_events, one row per change made through the OpenAPI, the
console or the CLI (a batch create writes one row for the batch).

Going down drops the table and the trail with it.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.mysql import MEDIUMTEXT

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Create audit_events (unless a first run cut short made it already)."""
    if "audit_events" in set(sa.inspect(op.get_bind()).get_table_names()):
        return
    op.create_table(
        "audit_events",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("at", sa.BigInteger, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("object_type", sa.String(32), nullable=False),
        sa.Column("object_id", sa.String(255), nullable=False),
        sa.Column("app_pk", sa.BigInteger, nullable=True),
        sa.Column("before_doc", MEDIUMTEXT, nullable=True),
        sa.Column("after_doc", MEDIUMTEXT, nullable=True),
        sa.Index("ix_audit_events_at", "at"),
        sa.Index("ix_audit_events_app_at", "app_pk", "at"),
        sa.Index("ix_audit_events_actor_at", "actor", "at"),
    )


def downgrade() -> None:
    """Drop audit_events."""
    if "audit_events" in set(sa.inspect(op.get_bind()).get_table_names()):
        op.drop_table("audit_events")
