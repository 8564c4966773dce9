"""An upkeep step that meets a lock conflict runs again in place, counted; it is neither
an outage (which would restart the dispatch loop) nor a failure logged with a trace."""

from __future__ import annotations

import pymysql  # type: ignore[import-untyped]
import pytest
from sqlalchemy.exc import OperationalError

from common.metrics import STORE_CONFLICTS
from services.dispatcher.upkeep.sweep import Upkeep


def conflict(code: int) -> OperationalError:
    return OperationalError("UPDATE executions", {}, pymysql.err.OperationalError(code, "x"))


def counted(stage: str) -> float:
    return float(STORE_CONFLICTS.labels(stage=stage)._value.get())


def test_a_step_that_meets_a_conflict_runs_again_and_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    raised = [conflict(1213), conflict(1205)]
    ran: list[int] = []

    def step() -> None:
        ran.append(1)
        if raised:
            raise raised.pop(0)

    before = counted("sweep")
    Upkeep._run("timeouts", step)
    assert len(ran) == 3
    assert counted("sweep") - before == 2
    assert not [r for r in caplog.records if r.levelname in {"WARNING", "ERROR"}]
