"""The notifier alone on a full queue: N recorded deliveries to the fast receiver are
published first, then one notifier (``_serve`` in a thread of this process, default
settings) delivers them; its attempts in flight are sampled every millisecond.

No dispatcher or worker runs, so what the pipeline does before the notifier (and how a
loaded box paces it) is out of the figure. With ``PYTHONPATH`` set to another tree's
source (and its ``bench``), the same script measures that tree's notifier: an A/B pair
is two runs, one per tree, back to back.

    PYTHONPATH=.:bench .venv/bin/python bench/notifier_alone.py --callbacks 3000

``--as-published`` sends them as the results consumer does (alone, in packs); without
it each is a copy the notifier reads its row for, one message each.

It prints one JSON line: seconds from the notifier's start to the last DELIVERED,
callbacks/s, and the attempts in flight (mean, and the share of samples under 12, what
one app may have going of the default 16).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import threading
import time
import uuid
from typing import Any

import redis
import sqlalchemy as sa
from harness import bench_namespace, drop_namespace
from receiver_process import ReceiverProcess
from sqlalchemy.engine import Engine

from common.broker import BatchPublisher, connect
from common.clock import ClusterClock
from common.config import NotifierSettings, StoreSettings
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.engine import make_engine
from common.db.jobs import NewJob, insert_jobs
from common.namespace import prepare_namespace
from common.topology import declare_core
from services.dispatcher.outcomes.callbacks import callback_message, callback_messages
from services.notifier.main import _serve, notifier_parts
from services.notifier.posting import CallbackPoster
from services.notifier.scheduler import AttemptScheduler
from tests.integration.helpers import make_app
from tests.integration.receivers import LOCAL_RECEIVERS

ONE_APP = 12
DELIVERED = sa.text("SELECT COUNT(*) FROM callback_deliveries WHERE status = 'DELIVERED'")


def record_deliveries(engine: Engine, url: str, count: int) -> list[NewDelivery]:
    """``count`` jobs of app 1, each with a PENDING delivery to ``url``."""
    made: list[NewDelivery] = []
    with engine.begin() as conn:
        for first in range(0, count, 500):
            names = [f"cb{n}" for n in range(first, min(count, first + 500))]
            jobs = [NewJob(1, name, "demo.noop", {}, None, 0, url, None, None) for name in names]
            rows = [_delivery(job_id, url) for job_id in insert_jobs(conn, jobs, 0)]
            MySqlDeliveryStore(conn).insert_deliveries(rows, 0)
            made += rows
    return made


def _delivery(job_id: int, url: str) -> NewDelivery:
    payload = json.dumps({"type": "execution.finished", "data": {"jobId": job_id}})
    return NewDelivery("msg_" + uuid.uuid4().hex, str(uuid.uuid4()), job_id, 1, url, payload)


def sample_in_flight(scheduler: AttemptScheduler, slots: int, done: threading.Event) -> list[int]:
    """Attempts in flight, every millisecond until ``done`` (in a thread)."""
    samples: list[int] = []

    def sample() -> None:
        while not done.is_set():
            samples.append(slots - scheduler.free)
            time.sleep(0.001)

    threading.Thread(target=sample, daemon=True).start()
    return samples


def deliver_all(settings: StoreSettings, engine: Engine, count: int) -> dict[str, Any]:
    """Run a notifier until ``count`` deliveries are DELIVERED; its figures."""
    notifier = NotifierSettings(namespace=settings.namespace)
    poster = CallbackPoster(notifier.request_timeout_seconds, policy=LOCAL_RECEIVERS)
    poster.start()
    clock = ClusterClock(redis.Redis.from_url(settings.redis_url))
    parts = notifier_parts(notifier, engine, poster, clock)
    stop, done = threading.Event(), threading.Event()
    began = time.monotonic()
    threading.Thread(target=_serve, args=(notifier, parts, stop), daemon=True).start()
    samples = sample_in_flight(parts.scheduler, notifier.concurrency, done)
    while True:
        with engine.connect() as conn:
            if conn.execute(DELIVERED).scalar_one() >= count:
                break
        time.sleep(0.05)
    took = time.monotonic() - began
    done.set()
    stop.set()
    time.sleep(0.5)
    poster.close()
    return {
        "callbacks": count,
        "seconds": round(took, 3),
        "per_s": round(count / took, 1),
        "mean_in_flight": round(sum(samples) / max(1, len(samples)), 2),
        "share_under_one_app": round(sum(s < ONE_APP for s in samples) / max(1, len(samples)), 3),
    }


def main() -> None:
    """Publish the callbacks, deliver them, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--callbacks", type=int, default=3_000)
    parser.add_argument(
        "--as-published",
        action="store_true",
        help="send them as the results consumer does: alone (no row read before the first "
        "attempt) and in packs of one app's callbacks to one URL",
    )
    args = parser.parse_args()
    settings, _ = bench_namespace()
    prepare_namespace(settings)
    engine = make_engine(settings, pool_size=20)
    try:
        with ReceiverProcess.start() as receiver:
            make_app(engine)
            rows = record_deliveries(engine, receiver.url, args.callbacks)
            connection = connect(settings, "notifier-alone")
            declare_core(connection.channel())
            if args.as_published:
                sent = callback_messages([dataclasses.replace(r, alone=True) for r in rows])
            else:
                sent = [callback_message(r) for r in rows]
            BatchPublisher(connection.channel()).publish(sent)
            connection.close()
            print(json.dumps(deliver_all(settings, engine, args.callbacks)), flush=True)
    finally:
        engine.dispose()
        drop_namespace(settings)


if __name__ == "__main__":
    main()
