"""Shortening the started keys of executions whose outcome MySQL now holds.

A worker keeps each execution's started key (its owner, then its result) for
KAIROS_IDEMPOTENCY_TTL_SECONDS, a week by default: at thousands of executions a second
that is hundreds of gigabytes of Redis. Once the outcome is recorded, the key is only
needed for a late copy of the dispatch message (requeued when a connection dropped),
which comes back within minutes, so it is given a shorter life from then on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import redis

from common.started_marks import StartedMarks

log = logging.getLogger(__name__)


class StartedKeys:
    """Gives recorded executions' started keys ``ttl_s`` more to live (0: left alone)."""

    def __init__(self, marks: StartedMarks | None, ttl_s: int) -> None:
        self._marks = marks
        self._ttl_s = ttl_s

    def recorded(self, execution_ids: Iterable[str]) -> None:
        """These executions' outcomes are committed: shorten their keys, in one round
        trip. A key that is gone stays gone (PEXPIRE on no key does nothing); Redis not
        answering leaves the keys their longer life, which costs memory, not safety."""
        ids = list(execution_ids)
        if self._marks is None or self._ttl_s <= 0 or not ids:
            return
        try:
            self._marks.shorten(ids, self._ttl_s)
        except redis.RedisError as e:
            log.warning("could not shorten %d started keys (%r); they expire later", len(ids), e)
