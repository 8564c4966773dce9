"""Signing-secret rotation: the previous secret and until when callbacks carry it too.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


# One ALTER each way: MySQL commits every DDL statement on its own, so two would leave
# half a migration behind if the second failed.


def upgrade() -> None:
    """Add the previous secret and its end to apps."""
    op.execute(
        "ALTER TABLE apps ADD COLUMN previous_signing_secret VARCHAR(128) NULL, "
        "ADD COLUMN previous_secret_until BIGINT NULL"
    )


def downgrade() -> None:
    """Remove what upgrade added."""
    op.execute(
        "ALTER TABLE apps DROP COLUMN previous_secret_until, DROP COLUMN previous_signing_secret"
    )
