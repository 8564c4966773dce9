"""One operator command's store work: a transaction on a short-lived engine of its own.

The CLI runs one command a process, so each command opens one connection and closes it
with the engine, instead of keeping a pool no later call would use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Connection

from common.config import StoreSettings
from common.db.engine import make_engine

T = TypeVar("T")


def in_transaction(settings: StoreSettings, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction (committed when it returns, rolled back if it
    raises) on a short-lived engine of its own; return what it returned."""
    engine = make_engine(settings, pool_size=1)
    try:
        with engine.begin() as conn:
            return work(conn)
    finally:
        engine.dispose()
