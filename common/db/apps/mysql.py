"""``AppStore`` on MySQL: the SQL of keys, grants and reads on one connection whose
transaction the caller holds, and ``MySqlAppTransactions`` to hand one out per
connection of an engine."""

from __future__ import annotations

from sqlalchemy.engine import Connection, Engine

from common.db.apps.sql_grants import AppGrantSql
from common.db.apps.sql_keys import AppKeySql
from common.db.apps.sql_reads import AppReadSql
from common.db.apps.store import AppStore
from common.db.store_transactions import EngineStores


class MySqlAppStore(AppKeySql, AppGrantSql, AppReadSql):
    """``AppStore`` on a MySQL connection whose transaction the caller holds."""

    __slots__ = ("_conn",)

    def __init__(self, conn: Connection) -> None:
        self._conn = conn


class MySqlAppTransactions(EngineStores[AppStore]):
    """``AppTransactions`` on an engine: one ``MySqlAppStore`` per connection."""

    __slots__ = ()

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine, MySqlAppStore)
