"""Which errors hold a batch stage back (a store outage) and which settle one item alone."""

from __future__ import annotations

import pymysql  # type: ignore[import-untyped]
from pika.exceptions import AMQPConnectionError
from redis.exceptions import ConnectionError as RedisConnectionError
from sqlalchemy.exc import DataError, IntegrityError, OperationalError

from common.errors import PublishFailedError
from common.store_errors import is_lock_conflict, is_store_outage


def mysql(kind: type[Exception], code: int) -> Exception:
    orig = pymysql.err.OperationalError(code, "message")
    error: Exception = kind("SELECT 1", {}, orig)
    return error


def test_connection_errors_are_outages() -> None:
    assert is_store_outage(mysql(OperationalError, 2013))  # lost connection
    assert is_store_outage(mysql(OperationalError, 2003))  # cannot connect
    assert is_store_outage(AMQPConnectionError())
    assert is_store_outage(PublishFailedError("x"))
    assert is_store_outage(RedisConnectionError())


def test_errors_about_the_data_are_not_outages() -> None:
    assert not is_store_outage(mysql(DataError, 1406))  # data too long
    assert not is_store_outage(mysql(IntegrityError, 1062))  # duplicate key
    assert not is_store_outage(mysql(OperationalError, 1690))  # value out of range
    assert not is_store_outage(ValueError("year 10000 is out of range"))
    assert not is_store_outage(UnicodeEncodeError("utf-8", "\udc80", 0, 1, "surrogate"))


def test_lock_conflicts_are_conflicts_not_outages() -> None:
    # A deadlock or a lock wait timeout is run again in place: the server is fine.
    for code in (1213, 1205):
        assert is_lock_conflict(mysql(OperationalError, code))
        assert not is_store_outage(mysql(OperationalError, code))
    assert not is_lock_conflict(mysql(OperationalError, 2013))
    assert not is_lock_conflict(mysql(IntegrityError, 1062))
    assert not is_lock_conflict(ValueError("1213"))
