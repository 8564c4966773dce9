"""The notifier's attempts are logged as counts a while, not as a line each."""

from __future__ import annotations

import logging

import pytest

from services.notifier.attempt_counts import AttemptCounts


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.endswith("attempt_counts")]


def test_counts_are_logged_once_the_while_has_passed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    counts = AttemptCounts(every=10.0, now=clock)
    for outcome in ["delivered"] * 3 + ["retrying"]:
        counts.add(outcome)
    clock.now += 5
    counts.maybe_log()
    assert lines(caplog) == []
    clock.now += 5
    counts.maybe_log()
    assert lines(caplog) == ["callback attempts in the last 10 s: delivered 3, retrying 1"]
    clock.now += 10
    counts.maybe_log()
    assert len(lines(caplog)) == 1, "no line for a while without attempts"


def test_the_counts_left_are_logged_when_the_notifier_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    clock = Clock()
    counts = AttemptCounts(every=10.0, now=clock)
    counts.add("dead")
    clock.now += 1
    counts.maybe_log(at_once=True)
    assert lines(caplog) == ["callback attempts in the last 1 s: dead 1"]
