"""Running a transaction again, in place, after MySQL rolled it back for a lock conflict.

InnoDB settles a deadlock by rolling one transaction back and asks the client to run
it again; a lock wait timeout asks the same. Either is a conflict between transactions,
not an outage: the stage that met it runs the transaction again at once, then a few
times more after short jittered pauses, and counts each in
``kairos_store_conflicts_total{stage}``. ``retry_conflicts`` is how every stage
does it, naming itself (``ConflictRetry.run`` where the function is not the stage's
own, as the sweep's steps and the retention passes are); what it runs is safe to
repeat from the start. Only a conflict that outlasts every try goes up to the caller.
"""

from __future__ import annotations

import functools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from sqlalchemy.exc import IntegrityError

from common.metrics import STORE_CONFLICTS
from common.store_errors import DEADLOCK, is_lock_conflict

log = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

ATTEMPTS = 5
_PAUSE_FIRST_S = 0.01
_PAUSE_MAX_S = 0.2
_DUPLICATE_KEY = 1062

__all__ = [
    "ATTEMPTS",
    "ConflictRetry",
    "is_duplicate_key",
    "is_lock_conflict",
    "retry_conflicts",
]


def is_duplicate_key(error: IntegrityError) -> bool:
    """True for MySQL's duplicate-entry error (a unique key refused the row)."""
    args: tuple[object, ...] = getattr(error.orig, "args", ())
    return len(args) > 0 and args[0] == _DUPLICATE_KEY


def _is_deadlock(error: BaseException) -> bool:
    args: tuple[object, ...] = getattr(getattr(error, "orig", None), "args", ())
    return is_lock_conflict(error) and args[0] == DEADLOCK


@dataclass(frozen=True)
class ConflictRetry:
    """How one stage retries its transactions: ``attempts`` None retries until written."""

    stage: str
    attempts: int | None = ATTEMPTS
    lock_waits: bool = True
    sleep: Callable[[float], None] = time.sleep

    def retries(self, error: BaseException) -> bool:
        """Whether ``error`` is a conflict this stage runs its transaction again for."""
        return is_lock_conflict(error) if self.lock_waits else _is_deadlock(error)

    def pause_s(self, conflicts: int) -> float:
        """The pause before the next try: none after the first conflict (a deadlock is
        already settled), then jittered, growing up to a fifth of a second."""
        if conflicts <= 1:
            return 0.0
        ceiling = min(_PAUSE_MAX_S, _PAUSE_FIRST_S * 2.0 ** (conflicts - 2))
        return random.uniform(0, ceiling)

    def _spent(self, conflicts: int) -> bool:
        return self.attempts is not None and conflicts >= self.attempts

    def run(self, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)``, run again after each conflict while tries are left."""
        conflicts = 0
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if not is_lock_conflict(e):
                    raise
                # Counted whether or not it is run again: a lock wait left to the caller
                # (``lock_waits=False``) is a conflict all the same.
                conflicts += 1
                STORE_CONFLICTS.labels(stage=self.stage).inc()
                if not self.retries(e) or self._spent(conflicts):
                    raise
                log.info("store conflict in %s (%s); running it again", self.stage, _code(e))
                self.sleep(self.pause_s(conflicts))


def _code(error: BaseException) -> object:
    args: tuple[object, ...] = getattr(getattr(error, "orig", None), "args", ())
    return args[0] if args else type(error).__name__


def retry_conflicts(
    stage: str, *, attempts: int | None = ATTEMPTS, lock_waits: bool = True
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a transaction function of ``stage`` to run again after a lock conflict.

    ``lock_waits=False`` retries deadlocks only: whoever holds a lock that was waited
    on in vain may hold it for long, and the caller has a better plan (deferring).
    """
    policy = ConflictRetry(stage, attempts, lock_waits)

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            return policy.run(fn, *args, **kwargs)

        return wrapped

    return decorate
