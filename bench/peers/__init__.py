"""The systems ``bench/vs_peers.py`` compares: the no-op task, and one round of each.

``celery_tasks`` and ``dramatiq_tasks`` hold the peers' task; ``rounds`` runs one timed
round of a peer and ``kairos_round`` one of Kairos.

Celery and Dramatiq are bench-only dependencies (``pip install -r
bench/requirements-peers.txt``). Their worker CLIs import the task modules by name
(``bench.peers.celery_tasks``, ``bench.peers.dramatiq_tasks``), so the broker URL comes
from the environment there, read when the worker imports the module; the benchmark
builds its own client objects with the ``make_*`` functions instead.

Every task does the same small thing: INCR a counter in Redis under a key space of its
own, and the task that brings the counter to ``expected`` stores the wall time it did
so. That is how the benchmark knows when the last of N tasks has run without a result
backend; Kairos is timed to its last SUCCEEDED execution row instead.
"""

from __future__ import annotations

import os
import time
from functools import cache

import redis

AMQP_URL_ENV = "BENCH_PEERS_AMQP_URL"
REDIS_URL_ENV = "BENCH_PEERS_REDIS_URL"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

CELERY_TASK_NAME = "bench.noop"
CELERY_QUEUE = "bench.celery"
DRAMATIQ_ACTOR_NAME = "bench_noop"
DRAMATIQ_QUEUE = "bench_dramatiq"


def done_at_key(counter_key: str) -> str:
    """Where the task that completes the count stores its wall time (epoch seconds)."""
    return f"{counter_key}:done_at"


@cache
def _redis_client(url: str) -> redis.Redis:
    """One client (with its own connection pool) per worker process, shared by threads."""
    return redis.Redis.from_url(url)


def count_completion(counter_key: str, expected: int) -> None:
    """The no-op task body: count this run; the run that reaches ``expected`` stamps it."""
    client = _redis_client(os.environ.get(REDIS_URL_ENV, DEFAULT_REDIS_URL))
    if int(client.incr(counter_key)) == expected:
        client.set(done_at_key(counter_key), repr(time.time()))
