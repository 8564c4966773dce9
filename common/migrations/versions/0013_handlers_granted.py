"""Handler access is granted, never assumed: NULL patterns now mean no handler.

Until now ``apps.handler_patterns`` NULL meant "every handler". From here on an app may
name only the handlers its patterns match, and NULL or an empty list matches none. So
that apps made before keep the access they had, their NULL turns into the explicit
every-handler pattern ``["*"]``. Running it again changes nothing.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

EVERY_HANDLER = '["*"]'


def upgrade() -> None:
    """Give every app without patterns the every-handler pattern it had implicitly."""
    op.execute(
        f"UPDATE apps SET handler_patterns = '{EVERY_HANDLER}' WHERE handler_patterns IS NULL"
    )


def downgrade() -> None:
    """Back to NULL for every handler, as older code reads it; an app granted no handler
    (an empty list) stays so."""
    op.execute(
        f"UPDATE apps SET handler_patterns = NULL WHERE handler_patterns = '{EVERY_HANDLER}'"
    )
