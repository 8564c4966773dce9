"""Requests that remember their first answer: a batch create or a manual trigger that
carries an ``Idempotency-Key``.

The answer is stored with the key, in the transaction that does the work, for
``KAIROS_IDEMPOTENCY_KEY_HOURS``: a repeat within it gets the same status, body and
Location back with ``Idempotent-Replayed: true``, without running the work again (a
trigger retried after a timeout does not run twice); a concurrent repeat waits for the
first to commit. The same key with another request is a 422 and changes nothing. An
error stores nothing, so a retry after it runs anew.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from common.db.idempotency_keys import (
    KeyedRequest,
    StoredAnswer,
    find_answer,
    purge_expired,
    store_answer,
    take_key,
)
from common.db.retry import is_duplicate_key, retry_conflicts
from common.errors import IdempotencyConflictError, IdempotencyKeyInUseError
from services.api.idempotency_header import HEADER, REPLAYED_HEADER
from services.api.state import ApiState

log = logging.getLogger(__name__)

_KEY_CONSTRAINT = "uq_idempotency_keys_app_operation_key"
# The stage these requests' lock conflicts are counted under, with a key or without
# (``kairos_store_conflicts_total``).
STAGE = "api_keyed_requests"


def _replay(request: KeyedRequest, stored: StoredAnswer) -> StoredAnswer:
    if stored.request_hash != request.request_hash:
        what = (
            "a trigger of another job or with other params"
            if request.operation == "triggerJob"
            else "another batch"
        )
        raise IdempotencyConflictError(request.key, None, HEADER, what)
    return stored


Work = Callable[[Connection], StoredAnswer]


@retry_conflicts(STAGE)
def _keyed_once(state: ApiState, request: KeyedRequest, work: Work) -> tuple[StoredAnswer, bool]:
    now = state.clock.now_ms()
    expires = now + int(state.settings.idempotency_key_hours * 3_600_000)
    with state.engine.begin() as conn:
        stored = find_answer(conn, request, now)
        if stored is not None:
            return _replay(request, stored), True
        take_key(conn, request, now, expires)
        answer = work(conn)
        store_answer(conn, request, answer)
    return answer, False


@retry_conflicts(STAGE)
def _unkeyed(state: ApiState, work: Work) -> StoredAnswer:
    with state.engine.begin() as conn:
        return work(conn)


def _is_key_taken(error: IntegrityError) -> bool:
    return is_duplicate_key(error) and _KEY_CONSTRAINT in str(error.orig)


def answer_once(
    state: ApiState, request: KeyedRequest | None, work: Work
) -> tuple[StoredAnswer, bool]:
    """``work``'s answer in one transaction, and whether it is a replay.

    With a key, the first answer is stored with the key in the same transaction; a
    repeat gets it back without running ``work``, and a concurrent repeat waits for the
    first to commit. An error (nothing written) stores nothing: a retry runs anew.
    """
    if request is None:
        return _unkeyed(state, work), False
    for _ in range(3):
        try:
            answer = _keyed_once(state, request, work)
        except IntegrityError as e:
            if not _is_key_taken(e):
                raise
            continue  # another request took the key and committed: its answer is found now
        _purge(state)
        return answer
    raise IdempotencyKeyInUseError(request.key)


def _purge(state: ApiState) -> None:
    """Delete a few expired keys; a failure only leaves them for the next request."""
    try:
        with state.engine.begin() as conn:
            purge_expired(conn, state.clock.now_ms())
    except Exception as e:
        log.warning("could not delete expired idempotency keys: %s", e)


def response_headers(location: str | None, replayed: bool) -> dict[str, Any]:
    """The headers of a 202 (``Location``) and of a replay (``Idempotent-Replayed``)."""
    headers: dict[str, Any] = {}
    if location is not None:
        headers["Location"] = location
    if replayed:
        headers[REPLAYED_HEADER] = "true"
    return headers
