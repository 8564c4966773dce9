"""The cluster at a glance, for ``kairos stats``: runs finished and failed and their
rates, trigger lag percentiles, workers, dead callbacks and queue depths.

Runs and lag come from the activity every dispatcher publishes per minute
(``common.activity``); queue depths from RabbitMQ's management API, which may be down
while the rest answers, so its error is kept beside the figures instead of failing them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
from sqlalchemy.engine import Engine

from common.activity import (
    MINUTE_MS,
    FinishedCounts,
    MinuteActivity,
    merged_buckets,
    quantile,
    read_activity,
)
from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.delivery_store import MySqlDeliveryStore
from common.db.workers import WorkerTransactions
from common.errors import StoreUnavailableError
from common.keys import RedisKeys
from common.states import WorkerState
from common.vhost import vhost_queues
from common.worker_views import worker_views

QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class ClusterStats(FinishedCounts):
    """What ``read_cluster_stats`` found, at ``now_ms`` on the cluster clock."""

    now_ms: int
    minutes: int
    seconds: float
    """The span the counts cover: whole minutes before this one, and this one so far."""
    finished: dict[str, int]
    lag: dict[float, float | None]
    """Trigger lag of first attempts by quantile, in seconds: None with no dispatch,
    ``inf`` past the histogram's last bucket."""
    workers_live: int
    workers_stale: int
    workers_known: int
    dead_callbacks: int
    queues: list[dict[str, int | str]] = field(default_factory=list)
    queue_error: str | None = None

    def per_second(self, count: int) -> float:
        """``count`` over the span, per second."""
        return count / self.seconds if self.seconds > 0 else 0.0


def _finished(minutes: list[MinuteActivity]) -> dict[str, int]:
    total: dict[str, int] = {}
    for minute in minutes:
        for status, count in minute.finished.items():
            total[status] = total.get(status, 0) + count
    return dict(sorted(total.items()))


def read_cluster_stats(
    settings: StoreSettings,
    engine: Engine,
    workers: WorkerTransactions,
    client: redis.Redis,
    stale_ms: int,
    minutes: int,
) -> ClusterStats:
    """The cluster's figures over the last ``minutes`` minutes (this one included);
    ``engine`` for the dead callbacks, ``workers`` for the workers."""
    clock = ClusterClock(client)
    now = clock.now_ms()
    activity = read_activity(client, RedisKeys(settings.namespace), now, minutes)
    buckets = merged_buckets(activity)
    with workers.reading() as store:
        present = [
            w for w in worker_views(store, now, stale_ms) if w.state is not WorkerState.FORGOTTEN
        ]
    with engine.connect() as conn:
        dead = MySqlDeliveryStore(conn).count_dead()
    try:
        queues, queue_error = vhost_queues(settings), None
    except StoreUnavailableError as e:
        queues, queue_error = [], str(e)
    return ClusterStats(
        now_ms=now,
        minutes=minutes,
        seconds=((minutes - 1) * MINUTE_MS + now % MINUTE_MS) / 1000,
        finished=_finished(activity),
        lag={q: quantile(q, buckets) for q in QUANTILES},
        workers_live=sum(1 for w in present if w.takes_work),
        workers_stale=sum(1 for w in present if w.stale),
        workers_known=len(present),
        dead_callbacks=dead,
        queues=queues,
        queue_error=queue_error,
    )
