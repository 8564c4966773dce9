"""Celery side of ``bench/vs_peers.py``: an app with the no-op task, no result backend.

The benchmark starts the worker as (the broker URL names the round's own vhost):

    BENCH_PEERS_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/<vhost> \\
        .venv/bin/celery -A bench.peers.celery_tasks worker --pool threads --concurrency 16

The module-level ``app`` exists for that command, which imports this module by name;
the benchmark's submitting side builds its own with ``make_celery``.
"""

# mypy: disable-error-code="import-untyped,import-not-found"

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from . import (
    AMQP_URL_ENV,
    CELERY_QUEUE,
    CELERY_TASK_NAME,
    DEFAULT_AMQP_URL,
    count_completion,
)


def make_celery(broker_url: str) -> tuple[Any, Any]:
    """A Celery app on ``broker_url`` (results ignored) and its registered no-op task."""
    app = Celery("bench_peers", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_ignore_result=True,
        task_default_queue=CELERY_QUEUE,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    task = app.task(name=CELERY_TASK_NAME, ignore_result=True)(count_completion)
    return app, task


app, noop = make_celery(os.environ.get(AMQP_URL_ENV, DEFAULT_AMQP_URL))
