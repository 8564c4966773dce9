"""Running a service: the jittered backoff between tries, and what a failure costs."""

from __future__ import annotations

import random
import threading

import pytest
from pika.exceptions import AMQPConnectionError

from common import runtime
from common.runtime import backoff_seconds, keep_serving


def test_backoff_doubles_up_to_its_cap_and_is_jittered_over_its_upper_half() -> None:
    rng = random.Random(7)
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (50, 10.0)]:
        waits = [backoff_seconds(failures, rng) for _ in range(200)]
        assert min(waits) >= ceiling / 2
        assert max(waits) <= ceiling
        assert max(waits) - min(waits) > ceiling / 4, "spread, not in step"


def test_keep_serving_tries_again_after_failures_with_growing_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stop = threading.Event()
    waits: list[float] = []
    calls = iter([AMQPConnectionError(), ValueError("bug"), AMQPConnectionError(), None])

    def serve() -> None:
        error = next(calls)
        if error is None:
            stop.set()
            return
        raise error

    monkeypatch.setattr(runtime, "backoff_seconds", lambda failures: float(failures))
    monkeypatch.setattr(stop, "wait", lambda seconds: waits.append(seconds))
    keep_serving("test", serve, stop)
    assert waits == [1.0, 2.0, 3.0]
