"""Activity per minute in Redis: a publisher writes only what grew, readers add up every
dispatcher's share."""

from __future__ import annotations

import redis

from common.activity import MINUTE_MS, ActivityPublisher, read_activity
from common.clock import ClusterClock
from common.config import StoreSettings
from common.keys import RedisKeys


def test_each_dispatcher_adds_what_grew_to_the_current_minute(
    namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    keys, clock = RedisKeys(namespace.namespace), ClusterClock(redis_client)
    counters = [{"finished:SUCCEEDED": 3.0, "lag_le:0.1": 2.0, "lag_le:+Inf": 3.0}]
    first = ActivityPublisher(redis_client, keys, clock, lambda: counters[-1])
    second = ActivityPublisher(redis_client, keys, clock, lambda: {"finished:FAILED": 1.0})
    first.publish()
    first.publish()  # nothing grew: nothing is added twice
    counters.append({"finished:SUCCEEDED": 5.0, "lag_le:0.1": 2.0, "lag_le:+Inf": 4.0})
    first.publish()
    second.publish()

    now = clock.now_ms()
    minutes = read_activity(redis_client, keys, now, 3)
    assert [m.minute_ms for m in minutes] == [
        now // MINUTE_MS * MINUTE_MS - back * MINUTE_MS for back in (2, 1, 0)
    ]
    # The publishes may straddle a minute: what counts is the sum.
    assert sum(m.succeeded for m in minutes) == 5 and sum(m.failed for m in minutes) == 1
    lag = {bound: 0 for bound in (0.1, float("inf"))}
    for minute in minutes:
        for bound, count in minute.lag_buckets:
            lag[bound] += count
    assert lag == {0.1: 2, float("inf"): 4}
    assert (
        0 < redis_client.ttl(keys.activity(minutes[-1].minute_ms)) <= 7200
        or not minutes[-1].finished
    )
