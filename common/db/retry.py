"""Retrying a transaction that MySQL rolled back for a deadlock or a lock wait timeout.

InnoDB resolves a deadlock by rolling one transaction back and asks the client to run
it again; the transaction functions here are safe to repeat from the start.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import IntegrityError, OperationalError
from tenacity import (
    before_sleep_log,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_RETRYABLE_CODES = frozenset({1213, 1205})  # deadlock, lock wait timeout
_DUPLICATE_KEY = 1062


def is_lock_conflict(error: BaseException) -> bool:
    """True for a MySQL error that asks the client to restart the transaction."""
    if not isinstance(error, OperationalError) or error.orig is None:
        return False
    args: tuple[object, ...] = getattr(error.orig, "args", ())
    return len(args) > 0 and args[0] in _RETRYABLE_CODES


def is_duplicate_key(error: IntegrityError) -> bool:
    """True for MySQL's duplicate-entry error (a unique key refused the row)."""
    args: tuple[object, ...] = getattr(error.orig, "args", ())
    return len(args) > 0 and args[0] == _DUPLICATE_KEY


def retry_lock_conflicts(fn: Callable[P, R]) -> Callable[P, R]:
    """Run ``fn`` again (up to 5 times, with jittered backoff) after a lock conflict."""
    wrapped: Callable[P, R] = retry(
        retry=retry_if_exception(is_lock_conflict),
        stop=stop_after_attempt(5),
        wait=wait_random_exponential(multiplier=0.01, max=0.2),
        before_sleep=before_sleep_log(log, logging.INFO),
        reraise=True,
    )(fn)
    return wrapped
