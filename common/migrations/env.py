"""Alembic environment: runs migrations on the connection ``kairos migrate`` passes in."""

from __future__ import annotations

from alembic import context

from common.db.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
