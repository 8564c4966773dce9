"""What the app store's key SQL (``common/db/apps/sql_keys.py``) sends MySQL, where the
order of a SET is the behaviour."""

from __future__ import annotations

from sqlalchemy.dialects import mysql

from common.db.apps import MySqlAppStore


class Capture:
    """A stand-in connection that keeps the statement it is given."""

    def __init__(self) -> None:
        self.sql = ""

    def execute(self, statement: object) -> object:
        self.sql = str(statement.compile(dialect=mysql.dialect()))  # type: ignore[attr-defined]
        return type("Result", (), {"rowcount": 1})()


def test_the_rotation_copies_the_old_secret_before_it_writes_the_new_one() -> None:
    conn = Capture()
    assert MySqlAppStore(conn).rotate_signing_secret("app_1", 1_000, 2_000) is not None  # type: ignore[arg-type]
    set_clause = conn.sql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    assert set_clause.index("previous_signing_secret=apps.signing_secret") < set_clause.index(
        "signing_secret=%s"
    )
