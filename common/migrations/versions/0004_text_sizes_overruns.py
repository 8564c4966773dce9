"""Text sizes in bytes, and timed-out runs still holding a worker's slots.

TEXT holds 65,535 bytes: params of exactly the documented 64 KiB, and results,
messages and callback payloads of multi-byte text, did not fit. User- and
handler-supplied text columns become MEDIUMTEXT (16 MiB). Workers report their runs
past a timeout whose thread goes on in ``workers.overrun``.

Changing a column's type rebuilds its table, holding writes to it meanwhile: on a large
executions table, migrate in a quiet period. The type changes can run again unchanged
and the new column comes last, so a migration cut short by a failure is completed by
running it again. Going down fails ("Data too long") while a row holds more than TEXT
can take.

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
    """Widen every user- or handler-supplied text column to MEDIUMTEXT; add the overruns."""
    for table, columns in _COLUMNS.items():
        op.execute(_modify(table, columns, "MEDIUMTEXT"))
    op.execute("ALTER TABLE workers ADD COLUMN overrun INT NOT NULL DEFAULT 0")


def downgrade() -> None:
    """Remove what upgrade added, then narrow the text columns back to TEXT."""
    op.execute("ALTER TABLE workers DROP COLUMN overrun")
    for table, columns in _COLUMNS.items():
        op.execute(_modify(table, columns, "TEXT"))
