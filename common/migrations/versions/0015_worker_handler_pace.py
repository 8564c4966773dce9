"""Each worker's run time per handler, beside its average over all of them.

The leader bounds a worker's queue by what it will start soon. An average over every
handler says a queue of quick runs and a queue of slow ones are the same, so after a
stretch of quick runs a flood of slow ones would fill the queue for minutes. The
heartbeat now carries the time of each handler's runs (``workers.handler_ms``, a JSON
object); workers that do not send it leave it NULL and are bounded as before.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _columns() -> set[str]:
    return {str(c["name"]) for c in sa.inspect(op.get_bind()).get_columns("workers")}


def upgrade() -> None:
    """Add workers.handler_ms (again, if a first run was cut short)."""
    if "handler_ms" not in _columns():
        op.execute("ALTER TABLE workers ADD COLUMN handler_ms TEXT NULL")


def downgrade() -> None:
    """Drop workers.handler_ms."""
    if "handler_ms" in _columns():
        op.execute("ALTER TABLE workers DROP COLUMN handler_ms")
