"""The keyed requests' transaction runs again after a lock conflict, counted under the
stage of its own (``api_keyed_requests``), as every stage names itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pymysql  # type: ignore[import-untyped]
from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError

from common.db.idempotency_keys import StoredAnswer
from common.metrics import STORE_CONFLICTS
from services.api.keyed_requests import STAGE, _unkeyed


class Engine:
    """An engine whose transactions hand out no connection the work reads."""

    @contextlib.contextmanager
    def begin(self) -> Iterator[Connection]:
        yield cast(Connection, None)


def test_a_request_without_a_key_runs_again_after_a_conflict_counted_as_its_stage() -> None:
    raised = [
        OperationalError("INSERT INTO jobs", {}, pymysql.err.OperationalError(code, "x"))
        for code in (1213, 1205)
    ]
    answer = cast(StoredAnswer, object())

    def work(_conn: Connection) -> StoredAnswer:
        if raised:
            raise raised.pop(0)
        return answer

    before = float(STORE_CONFLICTS.labels(stage=STAGE)._value.get())
    state = cast(Any, SimpleNamespace(engine=Engine()))
    assert _unkeyed(state, work) is answer
    assert STAGE == "api_keyed_requests"
    assert float(STORE_CONFLICTS.labels(stage=STAGE)._value.get()) - before == 2
