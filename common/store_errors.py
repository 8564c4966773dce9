"""The errors that mean a store went away (restarting, unreachable), not a bug."""

from __future__ import annotations

from pika.exceptions import AMQPError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from common.errors import PublishFailedError, StoreUnavailableError

# A loop that meets one of these logs one line and starts again; anything else is a
# bug worth a traceback.
STORE_LOST: tuple[type[BaseException], ...] = (
    AMQPError,
    PublishFailedError,
    StoreUnavailableError,
    OperationalError,
    InterfaceError,
    RedisConnectionError,
    RedisTimeoutError,
)

# MySQL errors that say the server, the connection or the locks stood in the way, not
# the data: server gone or restarting, too many connections, lock conflicts, read-only.
_OUTAGE_CODES = frozenset({1040, 1053, 1205, 1213, 1290, 1927, 4031})


def is_store_outage(error: BaseException) -> bool:
    """True when ``error`` means a store did not answer as it should (try again later),
    False when it is about the item at hand (its data), which must settle alone.

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
