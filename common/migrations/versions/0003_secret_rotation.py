"""Signing-secret rotation: the previous secret and until when callbacks carry it too.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the previous secret and its end to apps."""
    op.add_column("apps", sa.Column("previous_signing_secret", sa.String(128), nullable=True))
    op.add_column("apps", sa.Column("previous_secret_until", sa.BigInteger, nullable=True))


def downgrade() -> None:
    """Remove what upgrade added."""
    op.drop_column("apps", "previous_secret_until")
    op.drop_column("apps", "previous_signing_secret")
