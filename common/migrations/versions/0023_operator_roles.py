"""Operator roles: a role per operator (viewer, operator, admin) and the apps it is
limited to.

Every operator from before this migration becomes an admin of every app, so nobody loses
access on upgrade. Going down drops the roles and app lists: every operator may do
everything again.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def _columns() -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns("operators")}


def _tables() -> set[str]:
    return set(sa.inspect(op.get_bind()).get_table_names())


def upgrade() -> None:
    """Add operators.role (existing operators: admin) and the operator_apps table."""
    if "role" not in _columns():
        op.add_column(
            "operators",
            sa.Column("role", sa.String(16), nullable=False, server_default="admin"),
        )
    if "operator_apps" not in _tables():
        op.create_table(
            "operator_apps",
            sa.Column(
                "operator_id",
                sa.BigInteger,
                sa.ForeignKey("operators.id", ondelete="CASCADE"),
                primary_key=True,
            ),
            sa.Column("app_pk", sa.BigInteger, sa.ForeignKey("apps.id"), primary_key=True),
        )


def downgrade() -> None:
    """Drop operator_apps and operators.role."""
    if "operator_apps" in _tables():
        op.drop_table("operator_apps")
    if "role" in _columns():
        op.drop_column("operators", "role")
