"""An app's primary key is named ``app_pk`` wherever another table refers to it.

``apps.app_id`` is an app's public id (``app_...``); the foreign keys in ``api_keys``,
``jobs``, ``callback_deliveries`` and ``idempotency_keys`` held its primary key under the
same name. They, and the indexes named after them, are renamed; MariaDB keeps the
foreign keys and the indexes' contents as they are.

MySQL commits each DDL statement on its own: every step can run again, so a migration
cut short is completed by running it again.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_TABLES = ("api_keys", "jobs", "callback_deliveries", "idempotency_keys")
# (table, old name, new name) of the indexes named after the column; MariaDB named the
# one it made for callback_deliveries' foreign key after the column itself.
_INDEXES = (
    ("callback_deliveries", "app_id", "app_pk"),
    ("api_keys", "ix_api_keys_app_id", "ix_api_keys_app_pk"),
    ("jobs", "ix_jobs_app_id_id", "ix_jobs_app_pk_id"),
)


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def _indexes(table: str) -> set[str]:
    return {str(i["name"]) for i in sa.inspect(op.get_bind()).get_indexes(table)}


def _rename(old: str, new: str) -> None:
    for table in _TABLES:
        if old in _columns(table):
            op.execute(f"ALTER TABLE {table} RENAME COLUMN {old} TO {new}")
    for table, old_index, new_index in _INDEXES:
        before, after = (old_index, new_index) if new == "app_pk" else (new_index, old_index)
        if before in _indexes(table):
            op.execute(f"ALTER TABLE {table} RENAME INDEX {before} TO {after}")


def upgrade() -> None:
    """Rename the app foreign keys ``app_id`` to ``app_pk``, and their indexes."""
    _rename("app_id", "app_pk")


def downgrade() -> None:
    """Name them ``app_id`` again."""
    _rename("app_pk", "app_id")
