"""Recording execution outcomes: execution row, retry or job state, callback, in one commit."""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.engine import Engine

from common.alerts.rules import RuleSource
from common.alerts.run_alerts import RunEndFact, record_run_alerts
from common.clock import Clock, ClusterClock
from common.db.deliveries import NewDelivery
from common.db.engine import lock_waits_of
from common.db.executions import LockedExecution, NewExecution, Outcome
from common.db.jobs import TriggerSettings
from common.db.outcome_store import MySqlOutcomeStore, OutcomeStore
from common.db.retry import is_lock_conflict, retry_conflicts
from common.messages import ExecutionResult
from common.metrics import APP_LABELS, observe_app_start_lags, observe_finished
from common.schedule import retry_delay_ms
from common.states import DeliveryStatus, ExecutionStatus, JobStatus
from common.store_errors import is_store_outage
from services.dispatcher.outcomes.callbacks import RunEnd, create_deliveries
from services.dispatcher.outcomes.children import wake_children_of
from services.dispatcher.outcomes.waited_for import record_unsent_waits, sent_unrecorded
from services.dispatcher.trigger_end import JobEnd, job_end

log = logging.getLogger(__name__)

# A batch waits this long for a row another transaction holds before its results go
# one by one; one by one, a result whose row is held is deferred at once. A paused or
# cut-off dispatcher's open transaction can hold rows until MariaDB ends it
# (KAIROS_DATABASE_IDLE_TRANSACTION_SECONDS): waiting on each would hold every other
# result back that long.
BATCH_LOCK_WAIT_S = 1
ALONE_LOCK_WAIT_S = 0
STAGE = "results"


@dataclass(frozen=True)
class _Finished:
    result: ExecutionResult
    execution: LockedExecution
    job: TriggerSettings

    @property
    def retry_due(self) -> bool:
        """A failed attempt with retries left, of a job still alive."""
        return (
            self.result.status is not ExecutionStatus.SUCCEEDED
            and self.execution.attempt <= self.job.max_retries
            and self.job.status is not JobStatus.CANCELLED
        )


@retry_conflicts(STAGE)
def record_results(
    engine: Engine,
    clock: ClusterClock,
    results: Sequence[ExecutionResult],
    alerts: RuleSource | None = None,
) -> list[NewDelivery]:
    """Record every result not recorded before; return the callback deliveries it created.

    A result seen twice (a redelivery, or a copy another dispatcher handles at the same
    time) finds its execution already final, or locked and then final, and is skipped.
    A failed attempt with retries left becomes a new SCHEDULED attempt; otherwise the
    trigger ends: the job moves on and its callback is recorded, and the alerts its end
    fires through the rules of ``alerts`` (their deliveries are returned with the rest).
    """
    return _record(engine, clock, results, None, alerts)


# A lock waited on in vain is not waited on again here: whoever holds it may hold it for
# long, and the caller defers the result instead.
@retry_conflicts(STAGE, lock_waits=False)
def _record_bounded(
    engine: Engine,
    clock: ClusterClock,
    results: Sequence[ExecutionResult],
    lock_wait_s: int,
    alerts: RuleSource | None,
) -> list[NewDelivery]:
    """``record_results`` waiting at most ``lock_wait_s`` for each row lock."""
    return _record(engine, clock, results, lock_wait_s, alerts)


def _record(
    engine: Engine,
    clock: ClusterClock,
    results: Sequence[ExecutionResult],
    lock_wait_s: int | None,
    alerts: RuleSource | None = None,
) -> list[NewDelivery]:
    if not results:
        return []
    # Read before the transaction: a refresh of the cached rules is a query of its own.
    rules = alerts.rules() if alerts is not None else ()
    with engine.begin() as conn:
        waits = lock_waits_of(conn, lock_wait_s) if lock_wait_s is not None else None
        with waits or contextlib.nullcontext():
            finished, wanted = _record_in(MySqlOutcomeStore(conn), clock, results)
            if rules:
                ends = [_end_fact(f) for f in finished if not f.retry_due]
                wanted += record_run_alerts(conn, rules, ends, clock.now_ms())
    wake_children_of(engine, clock, [f.job.id for f in finished if _ends_parent_run(f)])
    _log(finished)
    observe_finished([f.result.status for f in finished])
    observe_app_start_lags(
        APP_LABELS,
        [
            (f.job.app_id, (f.result.started_at - f.execution.trigger_time) / 1000)
            for f in finished
            if f.execution.attempt == 1 and not f.execution.manual and f.result.started_at
        ],
    )
    return wanted


def _record_in(
    store: OutcomeStore, clock: Clock, results: Sequence[ExecutionResult]
) -> tuple[list[_Finished], list[NewDelivery]]:
    """Record ``results`` through ``store``, inside the caller's transaction: the
    results it recorded (those seen before are left out) and the deliveries it made."""
    finished = _lock_and_match(store, results)
    record_unsent_waits(
        store,
        [(f.execution, f.job) for f in finished if sent_unrecorded(f.execution, f.job)],
    )
    now = clock.now_ms()
    store.record_outcomes([_outcome(f) for f in finished])
    store.insert_executions([_retry(f, now) for f in finished if f.retry_due], now)
    ended = [f for f in finished if not f.retry_due]
    _end_triggers(store, ended, now)
    # Only runs of jobs with a callback URL are made into a ``RunEnd``: most have none.
    ends = [
        (
            RunEnd.of_result(
                f.result, f.execution.attempt, f.execution.trigger_time, f.execution.traceparent
            ),
            f.job,
        )
        for f in ended
        if f.job.callback_url
    ]
    # QUEUED: the results consumer publishes them after this commit (``_record``'s caller).
    return finished, create_deliveries(store, ends, now, DeliveryStatus.QUEUED)


def _end_fact(item: _Finished) -> RunEndFact:
    """A trigger's last attempt as an alert on it tells it."""
    result = item.result
    return RunEndFact(
        result.job_id,
        item.job.app_pk,
        item.job.app_id,
        result.execution_id,
        item.execution.attempt,
        result.status,
        result.message,
        result.worker_id,
        result.ended_at,
    )


def _ends_parent_run(item: _Finished) -> bool:
    """Whether the run ended (no retry follows) and some job waits for its job's runs."""
    return item.job.has_children and not item.retry_due


def _lock_and_match(store: OutcomeStore, results: Sequence[ExecutionResult]) -> list[_Finished]:
    refs = {x.execution_id: x.ref for x in results}
    rows = {r.execution_id: r for r in store.lock_unfinished(refs)}
    jobs = store.trigger_settings([r.job_id for r in rows.values()])
    finished: list[_Finished] = []
    for result in results:
        row = rows.pop(result.execution_id, None)
        if row is not None:
            finished.append(_Finished(result, row, jobs[row.job_id]))
    return finished


def _outcome(item: _Finished) -> Outcome:
    result = item.result
    return Outcome(
        item.execution,
        result.status,
        result.worker_id,
        result.message,
        result.result,
        result.started_at,
        result.ended_at,
    )


def _retry(item: _Finished, now: int) -> NewExecution:
    attempt = item.execution.attempt
    job = item.job
    delay = retry_delay_ms(attempt, job.retry_backoff_seconds, job.retry_backoff_max_seconds)
    return NewExecution(
        str(uuid.uuid4()),
        job.id,
        attempt + 1,
        item.execution.trigger_time,
        now + delay,
        manual=item.execution.manual,
        params=item.execution.params,
        # A retry is the same run again: it carries the attempt's traceparent.
        traceparent=item.execution.traceparent,
        backfill=item.execution.backfill,
    )


def _end_triggers(store: OutcomeStore, ended: Sequence[_Finished], now: int) -> None:
    """Move the jobs of ended triggers on: one-shot jobs to their end, recurring ones to
    their next trigger; manual runs leave their job as it is."""
    store.release_jobs([end for end in map(_job_end, ended) if end is not None], now)


def _job_end(item: _Finished) -> JobEnd | None:
    """``job_end`` of a finished run; a recurring job whose schedule has no trigger
    left (a cron past its last time) ends with its last run, as a one-shot job does."""
    return job_end(
        item.job.id,
        manual=item.execution.manual,
        last=not (item.job.recurring and item.job.has_next_trigger),
        status=item.result.status,
        may_be_held=True,
    )


def _log(finished: Sequence[_Finished]) -> None:
    for item in finished:
        # Success is the common case: at thousands a second it is DEBUG; the rest INFO.
        level = logging.DEBUG if item.result.status is ExecutionStatus.SUCCEEDED else logging.INFO
        log.log(
            level,
            "execution %s on %s%s",
            item.result.status.lower(),
            item.result.worker_id,
            "; retry scheduled" if item.retry_due else "",
            extra={"job_id": item.result.job_id, "execution_id": item.result.execution_id},
        )


WORKER_ID_CHARS = 64
UNRECORDABLE = "Kairos could not record this run's outcome ({error}); recorded FAILED instead"


@dataclass
class Recorded:
    """What recording a batch came to: callback deliveries to publish, the results that
    could not be recorded even as FAILED (to be set aside), and those whose rows another
    transaction holds (to be recorded later)."""

    deliveries: list[NewDelivery]
    set_aside: list[ExecutionResult]
    deferred: list[ExecutionResult] = field(default_factory=list)


def record_each_alone_if_need_be(
    engine: Engine,
    clock: ClusterClock,
    results: Sequence[ExecutionResult],
    alerts: RuleSource | None = None,
) -> Recorded:
    """``record_results`` for the batch; if it fails for a reason of its data, each result
    is recorded alone, so one bad result settles by itself and the others go on.

    A result that cannot be recorded as it is (text MySQL refuses, say) is recorded
    FAILED with a message that says why; one that cannot be recorded even so is set
    aside. A result whose rows another transaction holds (a paused dispatcher's open
    claim) is deferred, and the others go on. A store outage is raised: the whole batch
    waits for the store.
    """
    try:
        return Recorded(_record_bounded(engine, clock, results, BATCH_LOCK_WAIT_S, alerts), [])
    except Exception as e:
        if is_store_outage(e):
            raise
        log.warning("recording %d results failed (%r); recording them one by one", len(results), e)
    recorded = Recorded([], [])
    for result in results:
        try:
            recorded.deliveries += _record_bounded(
                engine, clock, [result], ALONE_LOCK_WAIT_S, alerts
            )
        except Exception as e:
            if is_lock_conflict(e):
                recorded.deferred.append(result)
            elif is_store_outage(e):
                raise
            else:
                _record_unrecordable(engine, clock, result, e, recorded, alerts)
    if recorded.deferred:
        log.warning("%d results wait for rows another transaction holds", len(recorded.deferred))
    return recorded


def _record_unrecordable(
    engine: Engine,
    clock: ClusterClock,
    result: ExecutionResult,
    error: Exception,
    recorded: Recorded,
    alerts: RuleSource | None = None,
) -> None:
    extra = {"job_id": result.job_id, "execution_id": result.execution_id}
    log.error("cannot record this result: %r", error, extra=extra)
    why = UNRECORDABLE.format(error=_safe_text(f"{type(error).__name__}: {error}")[:500])
    # Only what is known to fit: a worker id as long as its column, no result.
    worker_id = _safe_text(result.worker_id)[:WORKER_ID_CHARS]
    update = {
        "status": ExecutionStatus.FAILED,
        "message": why,
        "result": None,
        "worker_id": worker_id,
    }
    failed = result.model_copy(update=update)
    try:
        recorded.deliveries += record_results(engine, clock, [failed], alerts)
    except Exception as e:
        if is_store_outage(e):
            raise
        log.error("cannot record it FAILED either (%r); setting it aside", e, extra=extra)
        recorded.set_aside.append(result)


def _safe_text(text: str) -> str:
    """``text`` with whatever UTF-8 cannot carry (lone surrogates) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8")
