"""The errors that mean a store went away (restarting, unreachable), not a bug."""

from __future__ import annotations

from pika.exceptions import AMQPError
from sqlalchemy.exc import InterfaceError, OperationalError

from common.errors import PublishFailedError, StoreUnavailableError

# A loop that meets one of these logs one line and starts again; anything else is a
# bug worth a traceback.
STORE_LOST: tuple[type[BaseException], ...] = (
    AMQPError,
    PublishFailedError,
    StoreUnavailableError,
    OperationalError,
    InterfaceError,
)
