"""The leader's retention thread, on a fake pass: a lock conflict runs the pass again in
place and is counted under stage ``retention``; no warning, no back-off."""

from __future__ import annotations

from typing import Any, cast

import pymysql  # type: ignore[import-untyped]
import pytest
from sqlalchemy.exc import OperationalError

from common.clock import ClusterClock
from common.metrics import STORE_CONFLICTS
from services.dispatcher.upkeep import retention as retention_module
from services.dispatcher.upkeep.retention import BatchSize, RetentionLoop


def conflict(code: int) -> OperationalError:
    return OperationalError("DELETE FROM executions", {}, pymysql.err.OperationalError(code, "x"))


def counted() -> float:
    return float(STORE_CONFLICTS.labels(stage="retention")._value.get())


def test_a_pass_that_meets_a_conflict_runs_again_in_place_and_is_counted(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    raised = [conflict(1213), conflict(1205)]
    passes: list[int] = []

    def prune(*_args: object, size: BatchSize, **_kwargs: object) -> int:
        passes.append(size.rows)
        if raised:
            raise raised.pop(0)
        return 0

    monkeypatch.setattr(retention_module, "prune", prune)
    loop = RetentionLoop(cast(Any, None), cast(Any, None), cast(ClusterClock, None), 1_000)
    loop._wake.set()  # no rest between passes
    leading = iter([True, False])
    before = counted()
    loop._run(lambda: next(leading))
    assert len(passes) == 3
    assert counted() - before == 2
    assert not [r for r in caplog.records if r.levelname in {"WARNING", "ERROR"}]
