"""The dispatcher lease on real Redis."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from common.config import StoreSettings
from common.keys import RedisKeys
from services.dispatcher.leadership.lease import RedisLease
from services.dispatcher.leadership.lease_thread import Leadership


def lease(client: redis.Redis, namespace: StoreSettings, ttl_ms: int = 2_000) -> RedisLease:
    return RedisLease(client, RedisKeys(namespace.namespace).dispatcher_lease, ttl_ms)


class CountedLease(RedisLease):
    """A lease that counts the renewals that kept it."""

    renewed = 0

    def renew(self) -> bool:
        kept = super().renew()
        self.renewed += kept
        return kept


def wait_for(check: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_only_one_holder_at_a_time(redis_client: redis.Redis, namespace: StoreSettings) -> None:
    first, second = lease(redis_client, namespace), lease(redis_client, namespace)
    assert first.acquire()
    assert not second.acquire()
    assert first.holder() == first.token


def test_renew_and_release_need_the_holders_token(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    first, second = lease(redis_client, namespace), lease(redis_client, namespace)
    assert first.acquire()
    assert not second.renew()
    assert not second.release()
    assert first.holder() == first.token
    assert first.renew()
    assert first.release()
    assert second.acquire()


def test_an_expired_lease_goes_to_the_next_claimer(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    first, second = lease(redis_client, namespace, 100), lease(redis_client, namespace, 100)
    assert first.acquire()
    wait_for(lambda: first.holder() is None, 10, "the lease to expire")
    assert second.acquire()
    assert not first.renew()


def test_leadership_renews_and_hands_over_on_stop(
    redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    kept = CountedLease(redis_client, RedisKeys(namespace.namespace).dispatcher_lease, 300)
    leader = Leadership(kept)
    follower = Leadership(lease(redis_client, namespace, 300))
    leader.start()
    assert leader.is_leader.wait(2)
    follower.start()
    # Held across several renewals by the watchdog, however long they take to come.
    wait_for(lambda: kept.renewed >= 3, 30, "three renewals")
    assert leader.is_leader.is_set()
    assert not follower.is_leader.is_set()
    leader.stop()
    assert follower.is_leader.wait(2)
    follower.stop()
