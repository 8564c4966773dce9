"""When the cluster clock can answer without Redis."""

from __future__ import annotations

from typing import Any, cast

import pytest
import redis

from common.clock import ClusterClock


class StubRedis:
    """Answers TIME like Redis; counts the calls."""

    calls = 0

    def time(self) -> tuple[int, int]:
        self.calls += 1
        return 1_800_000_000, 0


def test_the_clock_is_fresh_only_after_a_sync_within_its_refresh() -> None:
    client = StubRedis()
    clock = ClusterClock(cast(Any, client), refresh_seconds=60.0)
    assert not clock.fresh()
    clock.now_ms()
    assert clock.fresh() and client.calls == 1
    clock.now_ms()
    assert client.calls == 1
    assert not ClusterClock(cast(Any, client), refresh_seconds=-1.0).fresh()


class FailingRedis(StubRedis):
    """Answers TIME until ``down`` is set, then refuses like a Redis that went away."""

    down = False

    def time(self) -> tuple[int, int]:
        if self.down:
            self.calls += 1
            raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379")
        return super().time()


def test_a_refresh_that_fails_keeps_the_last_offset_and_is_tried_again_a_second_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A worker stamps a run's end after its handler had its effects: a reading that
    # raised there sent the run back, and it ran twice once Redis came back empty.
    client = FailingRedis()
    clock = ClusterClock(cast(Any, client), refresh_seconds=0.0)
    first = clock.now_ms()
    client.down = True
    client.calls = 0
    later = [clock.now_ms() for _ in range(100)]
    assert all(first <= t < first + 1_000 for t in later)
    assert client.calls == 1, "a failed refresh is not tried again at every reading"
    assert "keeping its offset" in caplog.text


def test_a_clock_that_never_read_redis_raises() -> None:
    client = FailingRedis()
    client.down = True
    with pytest.raises(redis.ConnectionError):
        ClusterClock(cast(Any, client)).now_ms()
