"""Every Prometheus metric Kairos exports, in one place, and the helpers that feed them.

prometheus_client keeps its metrics in one registry per process (``REGISTRY``), and the
metrics below are registered there when this module is imported. That is the library's
design, and it fits here: a process is one service, so one registry per process is
what Prometheus scrapes. Nothing here reads settings or the environment at import; the
port a service serves its metrics on comes from its settings, in its ``main``.

Where each service exposes them:

- ``kairos api``: ``GET /metrics`` on the API port.
- ``kairos dispatcher``, ``kairos worker``, ``kairos notifier``: an HTTP server on
  ``KAIROS_METRICS_PORT`` (``--metrics-port``), started by ``common.probes.serve_probes``
  with ``/healthz`` and ``/readyz`` beside the metrics.

Every metric is defined in every process; each process feeds only its own, so a
dispatcher's page shows worker metrics with no samples. Names carry their unit
(``_seconds``, ``_messages``, ``_triggers``) and counters end in ``_total``.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

from common.loadbalance import WorkerLoad, load_score

log = logging.getLogger(__name__)

EXPOSITION_CONTENT_TYPE = prometheus_client.CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Seconds, for latencies that are a few ms when all is well and seconds when not."""

RUN_BUCKETS = (*LATENCY_BUCKETS, 30.0, 60.0, 300.0, 1800.0)
"""Seconds, for handler runs: most take ms, some take minutes."""

BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000)
"""Items per batch; the dispatcher's batch size is 500 by default."""

# --- dispatcher: claiming and firing -------------------------------------------------

CLAIM_BATCH = Histogram(
    "kairos_claim_batch_triggers",
    "Triggers claimed by one claim pass, counting only passes that claimed any.",
    buckets=BATCH_BUCKETS,
)
TRIGGERS_CLAIMED = Counter(
    "kairos_triggers_claimed_total",
    "Triggers claimed: each became an execution, SCHEDULED or SKIPPED.",
)
TRIGGERS_SKIPPED = Counter(
    "kairos_triggers_skipped_total",
    "Triggers not run because of their misfire or overlap policy; stage=claim when "
    "skipped as they were claimed, stage=fire when skipped as they were about to be sent.",
    ["stage"],
)
EXECUTIONS_DISPATCHED = Counter(
    "kairos_executions_dispatched_total",
    "Executions the broker took for a worker's queue at their time, by worker.",
    ["worker_id"],
)
TRIGGER_LAG = Histogram(
    "kairos_trigger_lag_seconds",
    "Cluster time of dispatch minus the trigger time, for first attempts.",
    buckets=LATENCY_BUCKETS,
)

# --- dispatcher: results and the worker directory ------------------------------------

EXECUTIONS_FINISHED = Counter(
    "kairos_executions_finished_total",
    "Execution outcomes recorded by a dispatcher, by status (SUCCEEDED, FAILED, "
    "TIMED_OUT, LOST); a failed attempt with retries left counts here too.",
    ["status"],
)
EXECUTIONS_RECONCILED = Counter(
    "kairos_executions_reconciled_total",
    "Executions the reconciler settled after they stayed QUEUED too long, by cause: "
    "unreported_result (the worker's stored outcome recorded), never_started (recorded "
    "LOST, retried if allowed) or unfinished_recall (a recall's leader went mid-way: "
    "given back to the firer). Zero in normal operation: anything else is a defect.",
    ["cause"],
)
EXECUTIONS_RECALLED = Counter(
    "kairos_executions_recalled_total",
    "Unstarted executions the leader took back from a worker's queue that held far more "
    "than the worker starts soon (a handler grown slow): they wait in Kairos for a slot, "
    "shared fairly between apps, and the copies left in the queue are dropped.",
)
EXECUTIONS_HELD = Counter(
    "kairos_executions_held_total",
    "Times the firer held a due execution back instead of sending it (no live worker "
    "runs its handler, or its job is paused); each is looked at again a few seconds "
    "later, with why in the execution's message.",
)
STORE_CONFLICTS = Counter(
    "kairos_store_conflicts_total",
    "Transactions MySQL rolled back for a lock conflict (deadlock or lock wait timeout) "
    "and that ran again in place, by stage (results, callback_attempt, claim, fire, "
    "sweep, retention, api_insert, api_control, api_keyed_requests). Not an outage: a "
    "steady few per second with several dispatchers or notifiers is normal; a climbing "
    "rate says rows are fought over.",
    ["stage"],
)
RESULTS_SET_ASIDE = Counter(
    "kairos_results_set_aside_total",
    "Results messages (or single results) a dispatcher could not read or record, even "
    "as FAILED, parked in kairos.results.dead for an operator. Zero in normal operation.",
)
WORKER_LOAD_SCORE = Gauge(
    "kairos_worker_load_score",
    "Equal-cost load score of each live worker as the leading dispatcher sees it "
    "(lower is less loaded).",
    ["worker_id"],
)
WORKER_ACTIVE = Gauge(
    "kairos_worker_active_runs",
    "Runs on each live worker: its last heartbeat's count plus executions queued to it "
    "since, as the leading dispatcher sees it.",
    ["worker_id"],
)
WORKER_QUEUE_DEPTH = Gauge(
    "kairos_worker_queue_depth_messages",
    "Messages ready (not yet delivered) in each worker's queue, from the leading "
    "dispatcher's last look at it; a message carries up to 50 executions.",
    ["worker_id"],
)

QUEUE_DEPTH = Gauge(
    "kairos_queue_depth_messages",
    "Messages ready in each of the namespace's own queues (kairos.results, "
    "kairos.results.dead, kairos.callbacks, kairos.callbacks.dead), from the leading "
    "dispatcher's look at them about once a second.",
    ["queue"],
)
HANDLER_LIVE_WORKERS = Gauge(
    "kairos_handler_live_workers",
    "Live workers running each handler that a worker not yet forgotten has registered, as "
    "the leading dispatcher sees them; 0 means executions of that handler are held.",
    ["handler"],
)

# --- api -----------------------------------------------------------------------------

API_REQUESTS = Counter(
    "kairos_api_requests_total",
    "HTTP requests the API answered, by method, route template (/openapi/jobs/{jobId}; "
    "<unmatched> for paths no route serves) and status code.",
    ["method", "route", "status"],
)
API_LATENCY = Histogram(
    "kairos_api_request_duration_seconds",
    "From a request's arrival to the end of its answer, by method and route template.",
    ["method", "route"],
    buckets=LATENCY_BUCKETS,
)

# --- every service that publishes ----------------------------------------------------

PUBLISH_CONFIRM = Histogram(
    "kairos_publish_confirm_seconds",
    "From the first basic.publish of a batch to the broker's tx.commit-ok.",
    buckets=LATENCY_BUCKETS,
)
MESSAGES_PUBLISHED = Counter(
    "kairos_messages_published_total",
    "Messages in committed publish batches, by exchange (amq.default for direct-to-queue).",
    ["exchange"],
)
MESSAGES_RETURNED = Counter(
    "kairos_messages_returned_total",
    "Messages the broker returned as unroutable (for dispatch: the worker's queue is gone).",
)
PUBLISH_FAILURES = Counter(
    "kairos_publish_failures_total",
    "Publish batches whose commit failed; none of their messages is known to have landed.",
)

# --- worker --------------------------------------------------------------------------

WORKER_RUNS = Counter(
    "kairos_worker_runs_total",
    "Handler runs on this worker, by handler and outcome (SUCCEEDED, FAILED, TIMED_OUT).",
    ["handler", "outcome"],
)
HANDLER_DURATION = Histogram(
    "kairos_handler_duration_seconds",
    "How long a handler ran on this worker, by handler (up to its timeout).",
    ["handler"],
    buckets=RUN_BUCKETS,
)
WORKER_OVERRUNS = Gauge(
    "kairos_worker_overrunning_runs",
    "Handler runs on this worker past their timeout (reported TIMED_OUT) whose thread "
    "has not ended yet; each holds one of the worker's slots until it does.",
)
EXECUTION_START_LAG = Histogram(
    "kairos_execution_start_lag_seconds",
    "Cluster time a worker started a first attempt minus its trigger time: for a job "
    "submitted to run now, the latency from creation to start.",
    buckets=LATENCY_BUCKETS,
)

# --- notifier ------------------------------------------------------------------------

CALLBACK_ATTEMPTS = Counter(
    "kairos_callback_attempts_total",
    "Callback POSTs, by what followed: delivered, retrying (a retry delay is next) or "
    "dead (parked in the dead-letter queue).",
    ["outcome"],
)

CALLBACKS_ORPHANED = Counter(
    "kairos_callbacks_orphaned_total",
    "Callback messages whose delivery row no longer exists (pruned by retention before "
    "a replay reached it): not sent, logged with their delivery id.",
)

CALLBACK_HOST_WAITING = Gauge(
    "kairos_callback_host_waiting",
    "Callbacks waiting in this notifier for an attempt, by receiving host (the ten with "
    'most waiting or going; the rest as host="other").',
    ["host"],
)

CALLBACK_HOST_IN_FLIGHT = Gauge(
    "kairos_callback_host_in_flight",
    "Callback attempts going now, by receiving host (labels as kairos_callback_host_waiting).",
    ["host"],
)

CALLBACK_HOST_LIMIT = Gauge(
    "kairos_callback_host_limit",
    "How many attempts at once each receiving host may have now: lower while it is slow "
    'or failing (labels as kairos_callback_host_waiting, without "other").',
    ["host"],
)

CALLBACK_APP_WAITING = Gauge(
    "kairos_callback_app_waiting",
    "Callbacks waiting in this notifier for an attempt, by app row id (the ten with most "
    'waiting or going; the rest as app="other").',
    ["app"],
)

CALLBACKS_DEFERRED = Counter(
    "kairos_callbacks_deferred_total",
    "Callbacks parked in the first retry tier without an attempt: reason=backlog when "
    "their app's or their receiving host's backlog in the notifier was past its bound, or "
    "they waited five minutes (a host failing every attempt); reason=earlier when an "
    "earlier run's callback of their job was still on its way.",
    ["reason"],
)


class Dispatched(Protocol):
    """What ``observe_dispatched`` reads of an execution sent to a worker."""

    @property
    def execution_id(self) -> str: ...

    @property
    def worker_id(self) -> str: ...

    @property
    def attempt(self) -> int: ...

    @property
    def trigger_time(self) -> int: ...


def exposition() -> bytes:
    """This process's metrics in the Prometheus text format (``EXPOSITION_CONTENT_TYPE``)."""
    return prometheus_client.generate_latest()


def observe_claim(claimed: int, skipped: int) -> None:
    """Count one committed claim pass."""
    if claimed:
        CLAIM_BATCH.observe(claimed)
        TRIGGERS_CLAIMED.inc(claimed)
    if skipped:
        TRIGGERS_SKIPPED.labels(stage="claim").inc(skipped)


def observe_dispatched(sent: Iterable[Dispatched], returned: Collection[str], now_ms: int) -> None:
    """Count executions committed to worker queues and the trigger lag of first attempts.

    A retry's trigger time is its first attempt's, so its lag would be its backoff.
    """
    per_worker: Tally[str] = Tally()
    for item in sent:
        if item.execution_id in returned:
            continue
        per_worker[item.worker_id] += 1
        if item.attempt == 1:
            TRIGGER_LAG.observe((now_ms - item.trigger_time) / 1000)
    for worker_id, count in per_worker.items():
        EXECUTIONS_DISPATCHED.labels(worker_id=worker_id).inc(count)


def observe_publish(exchanges: Sequence[str], returned: int, seconds: float) -> None:
    """Count one committed publish batch; an empty one (a bare commit) is not counted."""
    if not exchanges:
        return
    PUBLISH_CONFIRM.observe(seconds)
    for exchange, count in Tally(exchanges).items():
        MESSAGES_PUBLISHED.labels(exchange=exchange or "amq.default").inc(count)
    if returned:
        MESSAGES_RETURNED.inc(returned)


def observe_finished(statuses: Iterable[str]) -> None:
    """Count recorded execution outcomes by status."""
    for status, count in Tally(statuses).items():
        EXECUTIONS_FINISHED.labels(status=status).inc(count)


def set_worker_loads(loads: Sequence[WorkerLoad]) -> None:
    """Show the live workers' load and drop the series of workers no longer live."""
    live = {w.worker_id for w in loads}
    for worker in loads:
        WORKER_LOAD_SCORE.labels(worker_id=worker.worker_id).set(load_score(worker))
        WORKER_ACTIVE.labels(worker_id=worker.worker_id).set(worker.active)
    for gauge in (WORKER_LOAD_SCORE, WORKER_ACTIVE):
        for worker_id in _label_values(gauge, "worker_id") - live:
            gauge.remove(worker_id)


def set_queue_depth(worker_id: str, messages: int | None) -> None:
    """Show a worker queue's depth; None when the queue does not exist (any more)."""
    if messages is not None:
        WORKER_QUEUE_DEPTH.labels(worker_id=worker_id).set(messages)
    elif worker_id in _label_values(WORKER_QUEUE_DEPTH, "worker_id"):
        WORKER_QUEUE_DEPTH.remove(worker_id)


def clear_worker_gauges() -> None:
    """Drop every gauge only the leader sets: a dispatcher that stops leading no longer
    sees workers or queues."""
    for gauge in (WORKER_LOAD_SCORE, WORKER_ACTIVE, WORKER_QUEUE_DEPTH):
        gauge.clear()
    QUEUE_DEPTH.clear()
    HANDLER_LIVE_WORKERS.clear()


def set_core_queue_depth(queue: str, messages: int | None) -> None:
    """Show one of the namespace's own queues' depth; None when it cannot be read."""
    if messages is not None:
        QUEUE_DEPTH.labels(queue=queue).set(messages)
    elif queue in _label_values(QUEUE_DEPTH, "queue"):
        QUEUE_DEPTH.remove(queue)


def set_handler_live_workers(counts: dict[str, int]) -> None:
    """Show how many live workers run each known handler; drop handlers no longer known."""
    for handler, count in counts.items():
        HANDLER_LIVE_WORKERS.labels(handler=handler).set(count)
    for handler in _label_values(HANDLER_LIVE_WORKERS, "handler") - set(counts):
        HANDLER_LIVE_WORKERS.remove(handler)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    """Count one answered API request and how long it took."""
    API_REQUESTS.labels(method=method, route=route, status=str(status)).inc()
    API_LATENCY.labels(method=method, route=route).observe(seconds)


def observe_start(trigger_time: int, started_ms: int, attempt: int) -> None:
    """Record how late a first attempt started after its trigger time."""
    if attempt == 1:
        EXECUTION_START_LAG.observe((started_ms - trigger_time) / 1000)


def observe_run(handler: str, outcome: str, seconds: float) -> None:
    """Count one handler run and its duration."""
    WORKER_RUNS.labels(handler=handler, outcome=outcome).inc()
    HANDLER_DURATION.labels(handler=handler).observe(seconds)


def observe_overruns(count: int) -> None:
    """Show how many timed-out runs still hold a slot on this worker."""
    WORKER_OVERRUNS.set(count)


def _label_values(metric: Gauge, label: str) -> set[str]:
    return {sample.labels[label] for family in metric.collect() for sample in family.samples}


# --- the fair share: per app, labels bounded ------------------------------------------

# Apps that get a series of their own; the rest are counted under "other".
LABELLED_APPS = 20
OTHER_APPS = "other"

APP_RUNS_WAITING = Gauge(
    "kairos_app_runs_waiting",
    "Due runs of the app waiting for a free slot (leader only; the top apps by name, "
    'the rest as app="other").',
    ["app"],
)
APP_RUNS_GOING = Gauge(
    "kairos_app_runs_going",
    "Runs of the app in a worker's queue or running (leader only).",
    ["app"],
)
APP_START_LAG = Histogram(
    "kairos_app_start_lag_seconds",
    "A first attempt's start minus its trigger time, by app, as its result is recorded.",
    ["app"],
    buckets=LATENCY_BUCKETS,
)


class AppLabels:
    """The ``app`` label values: the first ``LABELLED_APPS`` apps seen keep their id,
    every later one is ``other``, so many apps cannot grow the scrape without bound."""

    def __init__(self, most: int = LABELLED_APPS) -> None:
        self._most = most
        self._given: set[str] = set()

    def of(self, app_id: str) -> str:
        """The label for ``app_id``."""
        if app_id in self._given:
            return app_id
        if len(self._given) < self._most:
            self._given.add(app_id)
            return app_id
        return OTHER_APPS


# The label values every per-app metric of this process shares.
APP_LABELS = AppLabels()


def set_app_standing(labels: AppLabels, waiting: dict[str, int], going: dict[str, int]) -> None:
    """Show each app's waiting and going runs (by app id); apps with neither show 0."""
    for gauge, counts in ((APP_RUNS_WAITING, waiting), (APP_RUNS_GOING, going)):
        totals: Tally[str] = Tally()
        for app_id, count in counts.items():
            totals[labels.of(app_id)] += count
        for label in _label_values(gauge, "app") - set(totals):
            gauge.labels(app=label).set(0)
        for label, count in totals.items():
            gauge.labels(app=label).set(count)


def observe_app_start_lags(labels: AppLabels, lags: Iterable[tuple[str, float]]) -> None:
    """Record first attempts' start lags (app id, seconds)."""
    for app_id, seconds in lags:
        APP_START_LAG.labels(app=labels.of(app_id)).observe(max(0.0, seconds))
