"""The notifier waits out a MySQL outage with a growing, jittered pause."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import OperationalError

from services.notifier.outages import StoreBackoff


def _outage() -> None:
    raise OperationalError("SELECT 1", {}, Exception(2003, "Can't connect"))


def test_each_outage_in_a_row_waits_longer_then_success_starts_afresh() -> None:
    pauses: list[float] = []
    backoff = StoreBackoff(sleep=pauses.append)
    for _ in range(5):
        with pytest.raises(OperationalError):
            backoff.run(_outage)
    assert backoff.failures == 5
    assert 0.5 <= pauses[0] <= 1 and 4 <= pauses[3] <= 8 and 5 <= pauses[4] <= 10
    assert backoff.run(lambda: 7) == 7
    assert backoff.failures == 0


def test_an_error_that_is_no_outage_does_not_wait() -> None:
    pauses: list[float] = []
    backoff = StoreBackoff(sleep=pauses.append)
    with pytest.raises(ValueError):
        backoff.run(lambda: int("x"))
    assert pauses == [] and backoff.failures == 0
