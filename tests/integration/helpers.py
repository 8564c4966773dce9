"""Small builders shared by integration tests."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.callback_urls import TableResolver
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.workers import Heartbeat, MySqlWorkerTransactions
from common.handler_patterns import EVERY_HANDLER, HandlerPatterns
from common.states import WorkerState

DEMO_HANDLERS = ("demo.echo", "demo.fail", "demo.log", "demo.noop", "demo.sleep")

# A public address the callback URL names of the tests resolve to (the test machine may
# have no DNS at all).
PUBLIC_ADDRESS = "93.184.215.14"


def public_names() -> TableResolver:
    """A resolver for the host names tests put in callback URLs: all public."""
    names = ("example.com", "hooks.example.com", "hooks.your-company.example")
    return TableResolver({name: [PUBLIC_ADDRESS] for name in names})


def make_app(
    engine: Engine, name: str = "tests", handlers: HandlerPatterns = EVERY_HANDLER
) -> AppCredentials:
    """Create an app (granted every handler unless told) and return its credentials."""
    with MySqlAppTransactions(engine).transaction() as apps:
        return apps.create_app(name, 0, handlers)


def register_worker(
    engine: Engine,
    worker_id: str = "w1",
    now_ms: int = 0,
    handlers: tuple[str, ...] = DEMO_HANDLERS,
    state: WorkerState = WorkerState.ACTIVE,
    capacity: int = 4,
) -> None:
    """Write a worker heartbeat row as a running worker would."""
    with MySqlWorkerTransactions(engine).transaction() as workers:
        workers.upsert_heartbeat(
            Heartbeat(
                worker_id=worker_id,
                hostname="test",
                pid=1,
                capacity=capacity,
                active=0,
                cpu_idle=90,
                avg_ms=0,
                handlers=handlers,
                state=state,
                started_at=now_ms,
                sent_at=now_ms,
            ),
        )


def sessions_waiting_for_a_lock(engine: Engine) -> int:
    """How many sessions on the engine's database wait for a row lock now, by MariaDB's
    own account: the positive sign that a step is blocked on a lock, where a short
    sleep could only say it had not finished yet."""
    statement = sa.text(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t "
        "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
        "WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE()"
    )
    with engine.connect() as conn:
        return int(conn.execute(statement).scalar_one())
