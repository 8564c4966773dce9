"""Callbacks for days, visible to their app: every attempt recorded (time, status code
or error, duration), and on each delivery when its next attempt is due and why it died.

An attempt row goes with its delivery (ON DELETE CASCADE): retention that prunes a
settled delivery prunes its attempts too.

MySQL commits each DDL statement on its own: every step can run again, so a migration
cut short is completed by running it again.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_ATTEMPTS = """
CREATE TABLE callback_attempts (
  id BIGINT NOT NULL AUTO_INCREMENT,
  delivery_pk BIGINT NOT NULL,
  attempt INTEGER NOT NULL,
  attempted_at BIGINT NOT NULL,
  status_code INTEGER NULL,
  error VARCHAR(4096) NULL,
  duration_ms INTEGER NOT NULL,
  PRIMARY KEY (id),
  KEY ix_callback_attempts_delivery (delivery_pk, id),
  CONSTRAINT fk_callback_attempts_delivery FOREIGN KEY (delivery_pk)
    REFERENCES callback_deliveries (id) ON DELETE CASCADE
)
"""


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def _delivery_columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("callback_deliveries")}


def upgrade() -> None:
    """Add callback_attempts, callback_deliveries.next_attempt_at and .dead_reason."""
    if "callback_attempts" not in _tables():
        op.execute(_ATTEMPTS)
    columns = _delivery_columns()
    if "next_attempt_at" not in columns:
        op.execute("ALTER TABLE callback_deliveries ADD COLUMN next_attempt_at BIGINT NULL")
    if "dead_reason" not in columns:
        op.execute("ALTER TABLE callback_deliveries ADD COLUMN dead_reason VARCHAR(32) NULL")


def downgrade() -> None:
    """Remove what upgrade added."""
    columns = _delivery_columns()
    if "dead_reason" in columns:
        op.execute("ALTER TABLE callback_deliveries DROP COLUMN dead_reason")
    if "next_attempt_at" in columns:
        op.execute("ALTER TABLE callback_deliveries DROP COLUMN next_attempt_at")
    op.execute("DROP TABLE IF EXISTS callback_attempts")
