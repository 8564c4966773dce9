"""The errors that mean a store went away (restarting, unreachable), not a bug, and
those that mean two transactions wanted the same rows (a conflict, not an outage)."""

from __future__ import annotations

from pika.exceptions import AMQPError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from common.errors import PublishFailedError, StoreUnavailableError

# A loop that meets one of these logs one line and starts again; anything else is a
# bug worth a traceback. A lock conflict is an OperationalError too, but it is run again
# where it happened (``common.db.retry``) and reaches a loop only after every try.
STORE_LOST: tuple[type[BaseException], ...] = (
    AMQPError,
    PublishFailedError,
    StoreUnavailableError,
    OperationalError,
    InterfaceError,
    RedisConnectionError,
    RedisTimeoutError,
)

# MySQL errors that say the server or the connection stood in the way, not the data:
# server gone or restarting, too many connections, read-only, connection killed.
_OUTAGE_CODES = frozenset({1040, 1053, 1290, 1927, 4031})
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
_CONFLICT_CODES = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})


def is_lock_conflict(error: BaseException) -> bool:
    """True for a MySQL error that asks the client to run its transaction again: a
    deadlock or a lock wait timeout. The server and the connection are fine."""
    if not isinstance(error, DBAPIError) or error.orig is None:
        return False
    args: tuple[object, ...] = getattr(error.orig, "args", ())
    return len(args) > 0 and args[0] in _CONFLICT_CODES


def is_store_outage(error: BaseException) -> bool:
    """True when ``error`` means a store did not answer as it should (try again later),
    False when it is about the item at hand (its data), which must settle alone, or a
    lock conflict (``is_lock_conflict``), which the stage runs again in place.

    A batch stage holds back on the first and carries on without the item on the second.
    """
    if isinstance(error, AMQPError | PublishFailedError | StoreUnavailableError):
        return True
    if isinstance(error, RedisConnectionError | RedisTimeoutError | InterfaceError):
        return True
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, OperationalError):
        args: tuple[object, ...] = getattr(error.orig, "args", ())
        code = args[0] if args else None
        return not isinstance(code, int) or code in _OUTAGE_CODES or 2000 <= code < 3000
    return False
