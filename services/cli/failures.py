"""A store that does not answer an operator command is one line on stderr, naming the
store and where it was looked for (without credentials), never a traceback."""

from __future__ import annotations

import httpx
from pika.exceptions import AMQPError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError

from common.config import StoreSettings
from common.errors import KairosError, StoreAccessDeniedError, StoreUnavailableError

OUTAGES: tuple[type[BaseException], ...] = (
    DBAPIError,
    RedisConnectionError,
    RedisTimeoutError,
    AMQPError,
    httpx.TransportError,
)
"""Driver errors that mean a store did not answer (or refused the connection)."""


def _detail(error: BaseException) -> str:
    if isinstance(error, DBAPIError) and error.orig is not None:
        return " ".join(str(error.orig).split()) or type(error.orig).__name__
    text = " ".join(str(error).split())
    return text or type(error).__name__


def as_store_outage(error: BaseException, settings: StoreSettings) -> KairosError | None:
    """The ``StoreUnavailableError`` (or ``StoreAccessDeniedError``) a driver error
    stands for, or None when ``error`` is not about a store answering (a bug, which
    keeps its traceback)."""
    if isinstance(error, StoreUnavailableError):
        return error
    if isinstance(error, DBAPIError):
        if _code(error) in _DENIED_CODES:
            return StoreAccessDeniedError("MySQL", settings.database_url, _detail(error))
        if not _is_connection_error(error):
            return None
        return StoreUnavailableError("MySQL", settings.database_url, _detail(error))
    if isinstance(error, RedisConnectionError | RedisTimeoutError):
        return StoreUnavailableError("Redis", settings.redis_url, _detail(error))
    if isinstance(error, AMQPError):
        return StoreUnavailableError("RabbitMQ", settings.amqp_url, _detail(error))
    if isinstance(error, httpx.TransportError):
        return StoreUnavailableError(
            "RabbitMQ management API", settings.amqp_management_url, _detail(error)
        )
    return None


# MySQL client errors 2000-2999 are the connection's own (refused, gone, timed out);
# 1040 too many connections, 1049 no such database, 1053 shutdown.
_CONNECTION_CODES = frozenset({1040, 1049, 1053})
# Access denied: to the server or a database (1045, 1044), to a command on a table or
# column (1142, 1143), or for want of a privilege (1227).
_DENIED_CODES = frozenset({1044, 1045, 1142, 1143, 1227})


def _code(error: DBAPIError) -> int | None:
    args: tuple[object, ...] = getattr(error.orig, "args", ())
    code = args[0] if args else None
    return code if isinstance(code, int) else None


def _is_connection_error(error: DBAPIError) -> bool:
    code = _code(error)
    if error.connection_invalidated:
        return True
    return code is not None and (2000 <= code < 3000 or code in _CONNECTION_CODES)
