"""MySQL errors name the statement, never its parameters (job params, results)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from common.config import StoreSettings
from common.db.driver import execute


def test_a_refused_row_error_holds_no_parameter_value(engine: Engine) -> None:
    secret = "card-4111-1111-1111-1111"
    with pytest.raises(DBAPIError) as raised, engine.begin() as conn:
        execute(conn, "INSERT INTO workers (worker_id) VALUES (%s)", (secret + "x" * 100,))
    assert secret not in str(raised.value)
    assert "INSERT INTO workers" in str(raised.value)


def test_engines_time_out_reads_and_writes(engine: Engine) -> None:
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        assert getattr(raw, "_read_timeout", None) == StoreSettings().database_read_timeout_seconds
        assert getattr(raw, "_write_timeout", None) == 60
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1
