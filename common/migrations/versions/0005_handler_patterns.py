"""Handler patterns: the handlers each app may name in its jobs (NULL: every handler).

Adding a nullable column last changes no row. Going down drops the column and with it
every app's restriction: each app may then name every handler again.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Add the handler patterns to apps."""
    op.execute("ALTER TABLE apps ADD COLUMN handler_patterns TEXT NULL")


def downgrade() -> None:
    """Remove what upgrade added."""
    op.execute("ALTER TABLE apps DROP COLUMN handler_patterns")
