"""The migrations build exactly the schema the code declares."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from common.db.schema import executions, metadata


def test_migrated_schema_matches_declared_metadata(engine: Engine) -> None:
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_due_scan_uses_status_next_trigger_index(engine: Engine) -> None:
    with engine.connect() as conn:
        plan = (
            conn.execute(
                sa.text(
                    "EXPLAIN SELECT id FROM jobs WHERE status='WAITING' "
                    "AND next_trigger_time <= 5 ORDER BY next_trigger_time LIMIT 10"
                )
            )
            .mappings()
            .all()
        )
    assert plan[0]["key"] == "ix_jobs_status_next_trigger"


def test_database_refuses_second_execution_of_same_trigger(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO apps (app_id, name, api_key_hash, signing_secret, created_at) "
                "VALUES ('a', 'a', 'h', 's', 0)"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO jobs (app_pk, job_name, handler, params, status, version, "
                "created_at, updated_at) VALUES (1, 'j', 'demo.noop', '{}', 'WAITING', 0, 0, 0)"
            )
        )
    row = {"job_id": 1, "attempt": 1, "trigger_time": 1000, "status": "PENDING", "created_at": 0}
    with engine.begin() as conn:
        conn.execute(executions.insert().values(execution_id="e1", **row))
    try:
        with engine.begin() as conn:
            conn.execute(executions.insert().values(execution_id="e2", **row))
    except IntegrityError:
        return
    raise AssertionError("a second execution of the same trigger was accepted")
