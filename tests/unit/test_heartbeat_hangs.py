"""A heartbeat that hangs (a store that neither answers nor fails) closes the worker's
fence, and the worker says so once per change, as it does for a heartbeat that fails."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, cast
from unittest import mock

import pytest

from common.consumer.stats import ConsumerStats
from common.keys import RedisKeys
from common.states import WorkerState
from common.stores import Stores
from common.worker_marks import RedisWorkerMarks
from services.worker.heartbeat import EARLY_GAP_S, Heartbeater, Load, WorkerIdentity

INTERVAL = 0.05


class Source:
    """A serving loop with nothing going."""

    stats = ConsumerStats()

    def load(self) -> Load:
        return Load(0, 0)

    def held(self) -> int:
        return 0

    def running_for(self, now: float) -> dict[str, float]:
        return {}


class HangingRedis:
    """A Redis client whose pipelines hang while ``open`` is clear."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.open.set()

    def pipeline(self) -> Any:
        pipe = mock.MagicMock()
        pipe.execute.side_effect = self._execute
        return pipe

    def delete(self, *_keys: object) -> int:
        return 0

    def _execute(self) -> list[object]:
        self.open.wait()
        return [1, 1, None, 0, None]


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_a_hanging_heartbeat_is_logged_once_per_change_of_the_fence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = HangingRedis()
    clock = mock.Mock()
    clock.now_ms.return_value = 0
    marks = RedisWorkerMarks(cast(Any, client), RedisKeys("t"))
    stores = cast(
        Stores, mock.Mock(worker_marks=lambda: marks, workers=mock.MagicMock(), clock=clock)
    )
    beat = Heartbeater(WorkerIdentity("w1", 1, ("demo.noop",)), Source(), stores, INTERVAL)
    caplog.set_level(logging.INFO)
    beat.start()
    try:
        client.open.clear()  # the next heartbeat waits for good
        wait_for(lambda: len(messages(caplog, logging.ERROR)) == 1, "the fence's closing")
        time.sleep(INTERVAL * 6)  # closed all along: said once
        closed = messages(caplog, logging.ERROR)
        assert len(closed) == 1 and "no heartbeat landed" in closed[0], closed
        assert "still waiting" in closed[0]
        client.open.set()
        wait_for(lambda: not beat.fence.closed, "the fence to reopen")
        wait_for(
            lambda: any("lands again" in m for m in messages(caplog, logging.WARNING)),
            "the reopening",
        )
        client.open.clear()
        wait_for(lambda: len(messages(caplog, logging.ERROR)) == 2, "the second closing")
    finally:
        client.open.set()
        beat.stop(WorkerState.STOPPED)
    assert len(messages(caplog, logging.ERROR)) == 2


class WatchedStop(threading.Event):
    """The heartbeat loop's stop event, noting how long each of the loop's waits is."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        """Note the wait, then wait."""
        self.waits.append(timeout)
        return super().wait(timeout)


def until(check: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_the_first_runs_time_is_sent_at_once_not_an_interval_later() -> None:
    """Until a heartbeat carries a timed run the leader bounds the worker's queue by what
    it measures; the first runs' average goes out as soon as they end."""
    clock = mock.Mock(now_ms=lambda: 0)
    stores = cast(
        Stores,
        mock.Mock(worker_marks=mock.MagicMock(), workers=mock.MagicMock(), clock=clock),
    )
    source = Source()
    source.stats = ConsumerStats()  # this test's own
    beat = Heartbeater(WorkerIdentity("w1", 1, ("demo.noop",)), source, stores, 60.0)
    sent: list[float] = []
    beat.send = lambda: sent.append(time.monotonic())  # type: ignore[method-assign]
    stop = beat._stop = WatchedStop()
    beat.start()  # one heartbeat at once, as every start
    try:
        until(lambda: len(stop.waits) >= 3, "the loop to look twice")
        assert len(sent) == 1, "nothing ran yet: the interval holds"
        source.stats.durations.append((time.monotonic(), 0.0002))
        until(lambda: len(sent) == 2, "the first run's time to go out")
        looked = len(stop.waits)
        until(lambda: len(stop.waits) >= looked + 3, "the loop to look three times more")
        assert len(sent) == 2, "then the interval again: no run outgrew its time"
    finally:
        beat.stop(WorkerState.STOPPED)


def test_a_run_that_outgrows_its_handlers_time_is_sent_at_once_then_not_again_at_once() -> None:
    """The leader prices a handler's runs by the time last reported for it: a run going
    far longer goes out at the next look, and no more often than ``EARLY_GAP_S``."""
    clock = mock.Mock(now_ms=lambda: 0)
    stores = cast(
        Stores,
        mock.Mock(worker_marks=mock.MagicMock(), workers=mock.MagicMock(), clock=clock),
    )
    going: dict[str, float] = {}

    class Running(Source):
        def running_for(self, now: float) -> dict[str, float]:
            return dict(going)

    source = Running()
    source.stats = ConsumerStats()
    beat = Heartbeater(WorkerIdentity("w1", 1, ("demo.sleep",)), source, stores, 60.0)
    sent: list[float] = []
    beat.send = lambda: sent.append(time.monotonic())  # type: ignore[method-assign]
    beat.reported_ms = {"demo.sleep": 1}
    source.stats.durations.append((time.monotonic(), 0.001))
    stop = beat._stop = WatchedStop()
    beat.start()
    try:
        until(lambda: len(sent) == 2, "the first run's time to go out")
        going["demo.sleep"] = 0.04
        looked = len(stop.waits)
        until(lambda: len(stop.waits) >= looked + 3, "the loop to look three times more")
        assert len(sent) == 2, "40 ms is not 50 ms more than 1 ms: not news"
        going["demo.sleep"] = 0.6
        until(lambda: len(sent) == 3, "the outgrown run to go out")
        until(lambda: len(sent) == 4, "the next one after the gap")
        assert sent[3] - sent[2] >= EARLY_GAP_S
    finally:
        beat.stop(WorkerState.STOPPED)
