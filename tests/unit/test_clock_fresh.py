"""When the cluster clock can answer without Redis."""

from __future__ import annotations

from typing import Any, cast

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
