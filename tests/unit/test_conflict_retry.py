"""The one lock-conflict retry: at once, then jittered, counted by stage, bounded or not."""

from __future__ import annotations

import pymysql  # type: ignore[import-untyped]
import pytest
from sqlalchemy.exc import OperationalError

from common.db.retry import ATTEMPTS, ConflictRetry, retry_conflicts
from common.metrics import STORE_CONFLICTS


def mysql_error(code: int) -> OperationalError:
    return OperationalError("UPDATE t", {}, pymysql.err.OperationalError(code, "message"))


class Flaky:
    """Raises each of ``errors`` in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def counted(stage: str) -> float:
    value = STORE_CONFLICTS.labels(stage=stage)._value.get()
    return float(value)


def test_a_deadlock_runs_again_at_once_then_after_jittered_pauses_and_is_counted() -> None:
    pauses: list[float] = []
    policy = ConflictRetry("t-deadlock", sleep=pauses.append)
    before = counted("t-deadlock")
    work = Flaky(mysql_error(1213), mysql_error(1205), mysql_error(1213))
    assert policy.run(work) == "done"
    assert work.calls == 4
    assert pauses[0] == 0.0
    assert all(0 <= p <= 0.2 for p in pauses[1:])
    assert counted("t-deadlock") - before == 3


def test_a_conflict_outlasting_every_try_goes_up() -> None:
    policy = ConflictRetry("t-gives-up", sleep=lambda _s: None)
    work = Flaky(*[mysql_error(1213)] * (ATTEMPTS + 1))
    with pytest.raises(OperationalError):
        policy.run(work)
    assert work.calls == ATTEMPTS


def test_until_written_retries_as_long_as_it_takes() -> None:
    policy = ConflictRetry("t-until", attempts=None, sleep=lambda _s: None)
    work = Flaky(*[mysql_error(1213)] * 40)
    assert policy.run(work) == "done"
    assert work.calls == 41


def test_other_errors_are_not_retried() -> None:
    policy = ConflictRetry("t-other", sleep=lambda _s: None)
    for error in (mysql_error(2013), ValueError("x")):
        work = Flaky(error)
        with pytest.raises(type(error)):
            policy.run(work)
        assert work.calls == 1


def test_without_lock_waits_only_deadlocks_run_again() -> None:
    policy = ConflictRetry("t-deadlocks-only", lock_waits=False, sleep=lambda _s: None)
    assert policy.run(Flaky(mysql_error(1213))) == "done"
    before = counted("t-deadlocks-only")
    with pytest.raises(OperationalError):
        policy.run(Flaky(mysql_error(1205)))
    assert counted("t-deadlocks-only") - before == 1, "left to the caller, and counted"


def test_the_decorator_keeps_the_function_and_its_stage() -> None:
    work = Flaky(mysql_error(1213))

    @retry_conflicts("t-decorated")
    def transaction(x: int) -> str:
        """Its docstring."""
        return f"{work()} {x}"

    before = counted("t-decorated")
    assert transaction(3) == "done 3"
    assert transaction.__doc__ == "Its docstring."
    assert counted("t-decorated") - before == 1
