"""Alerts: alert_rules and alert_states, and callback_deliveries that carry an alert
(no execution, job or app; the rule whose secret signs it).

Going down drops both tables and every alert delivery with them.

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def _delivery_columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("callback_deliveries")}


def upgrade() -> None:
    """Create alert_rules and alert_states, and let a delivery be an alert (each step
    skipped when a first run cut short made it already)."""
    if "alert_rules" not in _tables():
        op.create_table(
            "alert_rules",
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
            sa.Column("rule_id", sa.String(40), nullable=False, unique=True),
            sa.Column(
                "app_pk",
                sa.BigInteger,
                sa.ForeignKey("apps.id", ondelete="CASCADE"),
                nullable=True,
            ),
            sa.Column("url", sa.String(2048), nullable=False),
            sa.Column("kinds", sa.String(128), nullable=False),
            sa.Column("streak", sa.Integer, nullable=False, server_default="1"),
            sa.Column("every_seconds", sa.Integer, nullable=False, server_default="600"),
            sa.Column("signing_secret", sa.String(128), nullable=False),
            sa.Column("created_at", sa.BigInteger, nullable=False),
            sa.Column("created_by", sa.String(128), nullable=False),
        )
    if "alert_states" not in _tables():
        op.create_table(
            "alert_states",
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
            sa.Column(
                "rule_pk",
                sa.BigInteger,
                sa.ForeignKey("alert_rules.id", ondelete="CASCADE"),
                nullable=False,
            ),
            sa.Column("kind", sa.String(16), nullable=False),
            sa.Column("subject", sa.String(64), nullable=False),
            sa.Column("streak", sa.Integer, nullable=False, server_default="0"),
            sa.Column("last_sent_at", sa.BigInteger, nullable=True),
            sa.Column("suppressed", sa.Integer, nullable=False, server_default="0"),
            sa.Column("suppressed_since", sa.BigInteger, nullable=True),
            sa.Column("marker", sa.BigInteger, nullable=True),
            sa.Column("updated_at", sa.BigInteger, nullable=False),
            sa.UniqueConstraint(
                "rule_pk", "kind", "subject", name="uq_alert_states_rule_kind_subject"
            ),
            sa.Index("ix_alert_states_suppressed", "suppressed", "updated_at"),
        )
    if "alert_rule_pk" not in _delivery_columns():
        op.execute(
            "ALTER TABLE callback_deliveries "
            "MODIFY execution_id VARCHAR(36) NULL, "
            "MODIFY job_id BIGINT NULL, "
            "MODIFY app_pk BIGINT NULL, "
            "ADD COLUMN alert_rule_pk BIGINT NULL, "
            "ADD CONSTRAINT fk_callback_deliveries_alert_rule FOREIGN KEY (alert_rule_pk) "
            "REFERENCES alert_rules (id) ON DELETE CASCADE"
        )


def downgrade() -> None:
    """Drop the alert deliveries, the alert tables, and make deliveries callbacks only."""
    if "alert_rule_pk" in _delivery_columns():
        op.execute("DELETE FROM callback_deliveries WHERE alert_rule_pk IS NOT NULL")
        op.execute(
            "ALTER TABLE callback_deliveries DROP FOREIGN KEY fk_callback_deliveries_alert_rule"
        )
        op.execute(
            "ALTER TABLE callback_deliveries "
            "DROP COLUMN alert_rule_pk, "
            "MODIFY execution_id VARCHAR(36) NOT NULL, "
            "MODIFY job_id BIGINT NOT NULL, "
            "MODIFY app_pk BIGINT NOT NULL"
        )
    for table in ("alert_states", "alert_rules"):
        if table in _tables():
            op.drop_table(table)
