"""The stores a Kairos process works with, built once in its ``main`` and passed down."""

from __future__ import annotations

from dataclasses import dataclass

from pika.adapters.blocking_connection import BlockingConnection
from redis import Redis
from sqlalchemy.engine import Engine

from common.broker import connect
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.apps import MySqlAppTransactions
from common.db.workers import MySqlWorkerTransactions
from common.keys import RedisKeys
from common.started_marks import RedisStartedMarks
from common.worker_marks import RedisWorkerMarks


@dataclass(frozen=True)
class Stores:
    """MySQL (an engine), Redis (a client, its key names, the cluster clock) and how to
    reach RabbitMQ: pika connections are not thread-safe, so each thread opens its own."""

    settings: StoreSettings
    engine: Engine
    redis: Redis
    keys: RedisKeys
    clock: ClusterClock

    @classmethod
    def build(cls, settings: StoreSettings, engine: Engine, client: Redis) -> Stores:
        """Stores for ``settings``' namespace around an engine and a Redis client."""
        return cls(settings, engine, client, RedisKeys(settings.namespace), ClusterClock(client))

    def apps(self) -> MySqlAppTransactions:
        """The apps aggregate on the engine (``common/db/apps``)."""
        return MySqlAppTransactions(self.engine)

    def workers(self) -> MySqlWorkerTransactions:
        """The workers aggregate on the engine (``common/db/workers.py``)."""
        return MySqlWorkerTransactions(self.engine)

    def started_marks(self) -> RedisStartedMarks:
        """The started keys and epoch of the namespace (``common/started_marks.py``)."""
        return RedisStartedMarks(self.redis, self.keys)

    def worker_marks(self) -> RedisWorkerMarks:
        """The workers' heartbeat hashes and operators' orders (``common/worker_marks.py``)."""
        return RedisWorkerMarks(self.redis, self.keys)

    def connect_broker(self, name: str) -> BlockingConnection:
        """A new broker connection to the namespace's vhost, named for the management UI."""
        return connect(self.settings, name)
