"""Text sizes in bytes: user- and handler-supplied text columns become MEDIUMTEXT.

TEXT holds 65,535 bytes: params of exactly the documented 64 KiB, and results,
messages and callback payloads of multi-byte text, did not fit. MEDIUMTEXT holds 16 MiB.

Changing a column's type rebuilds its table, holding writes to it meanwhile: on a large
executions table, migrate in a quiet period. Each statement can run again unchanged, so
a migration cut short by a failure is completed by running it again. Going down fails
("Data too long") while a row holds more than TEXT can take.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = {
    "jobs": ("params NOT NULL",),
    "executions": ("message NULL", "result NULL"),
    "callback_deliveries": ("payload NOT NULL", "last_error NULL"),
}


def _modify(table: str, columns: tuple[str, ...], type_: str) -> str:
    changes = []
    for column in columns:
        name, nullability = column.split(" ", 1)
        changes.append(f"MODIFY {name} {type_} {nullability}")
    return f"ALTER TABLE {table} " + ", ".join(changes)


def upgrade() -> None:
    """Widen every user- or handler-supplied text column to MEDIUMTEXT."""
    for table, columns in _COLUMNS.items():
        op.execute(_modify(table, columns, "MEDIUMTEXT"))


def downgrade() -> None:
    """Narrow them back to TEXT."""
    for table, columns in _COLUMNS.items():
        op.execute(_modify(table, columns, "TEXT"))
