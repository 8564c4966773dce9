"""Run one dispatched execution: idempotency check, handler call, outcome."""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import redis
from pydantic import ValidationError

from common.broker import OutgoingMessage
from common.clock import ClusterClock
from common.jsontext import clip_utf8
from common.keys import RedisKeys
from common.messages import DispatchMessage, ExecutionResult
from common.metrics import observe_run, observe_start
from common.result_messages import stand_in_result, written_results_message
from common.started_marks import RECALLED, RedisStartedMarks
from common.states import ExecutionStatus
from common.tracing.spans import NO_TRACING, Tracing
from services.worker.calling import HandlerTimeoutError, call_handler
from services.worker.local_runs import LocalRuns
from services.worker.log_writer import RunLogWriter
from services.worker.overruns import Overruns
from services.worker.packs import Unit, Unreadable
from services.worker.registry import HandlerContext, HandlerFn
from services.worker.rendering import describe_error, render_result
from services.worker.run_logs import RunLog
from services.worker.start_guard import Fresh, RowStatuses, StartGuard, Verdict

log = logging.getLogger(__name__)

Outcome = Literal[ExecutionStatus.SUCCEEDED, ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT]


@dataclass(frozen=True)
class Admitted:
    """A parsed dispatch message; ``owner`` is set when another run already took it,
    ``outcome`` when that run ended and stored its result (JSON); ``verdict`` says
    whether its row lets a fresh one run (``services/worker/start_guard.py``)."""

    message: Unit
    owner: str | None
    outcome: str | None = None
    verdict: Verdict = Verdict.RUN


class ExecutionRunner:
    """Runs executions on one worker; safe to call from many pool threads at once."""

    def __init__(
        self,
        worker_id: str,
        handlers: Mapping[str, HandlerFn],
        client: redis.Redis,
        keys: RedisKeys,
        clock: ClusterClock,
        idempotency_ttl_seconds: int,
        rows: RowStatuses | None = None,
        tracing: Tracing = NO_TRACING,
        run_logs: RunLogWriter | None = None,
    ) -> None:
        self._worker_id = worker_id
        self._tracing = tracing
        self._handlers = handlers
        self._marks = RedisStartedMarks(client, keys)
        self._clock = clock
        self._ttl = idempotency_ttl_seconds
        self._local = LocalRuns()
        self._guard = StartGuard(rows)
        self._redelivered: set[str] = set()
        self._run_logs = run_logs
        self.overruns = Overruns()

    def note_redelivered(self, units: Sequence[Unit]) -> None:
        """Mark units the broker delivered before (their row is read before they run);
        called from the connection thread, as ``admit`` is."""
        self._redelivered.update(u.execution_id for u in units)

    def admit(self, messages: Sequence[Unit]) -> list[Admitted]:
        """Mark executions started, in one Redis call.

        An execution whose key was already set is admitted with the key's owner, so the
        run reports it instead of running it again. One taken now that was redelivered
        or starts late has its row read first (``StartGuard``); if that read fails, the
        keys taken now are given back and the error goes up.
        """
        if not messages:
            return []
        now = self._clock.now_ms()
        ids = [m.execution_id for m in messages]
        taken = self._marks.take_runs(ids, self._worker_id, self._ttl, now)
        redelivered = [m.execution_id in self._redelivered for m in messages]
        self._redelivered.difference_update(ids)
        fresh = [
            Fresh(m, again)
            for m, mark, again in zip(messages, taken.marks, redelivered, strict=True)
            if mark is None and isinstance(m, DispatchMessage)
        ]
        try:
            verdicts = self._guard.verdicts(fresh, now, taken.epoch_ms)
        except Exception:
            self._marks.release_runs([f.message.execution_id for f in fresh], self._worker_id)
            raise
        return [
            Admitted(m, mark.owner, mark.outcome)
            if mark is not None
            else Admitted(m, None, verdict=verdicts.get(m.execution_id, Verdict.RUN))
            for m, mark in zip(messages, taken.marks, strict=True)
        ]

    def release(self, admitted: Sequence[Admitted]) -> int:
        """Give back the started keys of admitted runs that never started; how many.

        Their deliveries return to the queue; without this, the copy that comes back
        would find this worker's key and be reported LOST although it never ran.
        """
        ids = [a.message.execution_id for a in admitted if a.owner is None]
        if not ids:
            return 0
        released = self._marks.release_runs(ids, self._worker_id)
        log.info("released %d admitted runs that never started", released)
        return released

    def report(self, outcomes: Sequence[ExecutionResult | None]) -> list[OutgoingMessage]:
        """Store the outcomes with their started keys, then pack them to be published.

        Stored first: if the publish or the ack is lost with the connection, the copy
        of the delivery that comes back reports this outcome instead of LOST. Storing is
        best effort; without it such a copy is reported LOST.
        """
        written = [(o.execution_id, o.model_dump_json()) for o in outcomes if o is not None]
        if not written:
            return []
        try:
            self._marks.store_outcomes(self._worker_id, written)
        except redis.RedisError as e:
            log.warning("could not store %d outcomes in Redis: %s", len(written), e)
        else:
            self._local.forget([execution_id for execution_id, _ in written])
        # The message carries the very texts stored: each result is written once.
        return [written_results_message(self._worker_id, written)]

    def keep_outcome(self, outcome: ExecutionResult | None) -> None:
        """Store an outcome that cannot be published now (its connection is gone) with
        its started key, so the copy that comes back, or the leader, reports it."""
        if outcome is not None:
            self.report([outcome])

    def run(self, message: DispatchMessage) -> ExecutionResult | None:
        """Admit and run one execution (``admit`` then ``execute``)."""
        return self.execute(self.admit([message])[0])

    def execute(self, admitted: Admitted) -> ExecutionResult | None:
        """Run an admitted execution; None when another worker already took it."""
        message = admitted.message
        extra = {"job_id": message.job_id, "execution_id": message.execution_id}
        if admitted.owner is not None:
            return self._already_started(admitted, extra)
        if admitted.verdict is Verdict.DROP:
            log.info("execution already ended; dropping its late copy", extra=extra)
            return None
        if admitted.verdict is Verdict.LOST:
            return self._lost(
                message,
                "delivered again after Redis lost the mark of its earlier delivery: it may "
                "have run already, so it is not run again",
            )
        if isinstance(message, Unreadable):
            return self._unreadable(message, extra)
        self._local.begin(message.execution_id)
        result = None
        try:
            result = self._run_admitted(message, extra)
        finally:
            self._local.end(message.execution_id, result)
        return result

    def _run_admitted(self, message: DispatchMessage, extra: dict[str, object]) -> ExecutionResult:
        started = self._clock.now_ms()
        observe_start(message.trigger_time, started, message.attempt)
        began = time.perf_counter()
        status, text, result = self._call(message)
        observe_run(message.handler, status, time.perf_counter() - began)
        # Success is the common case: at thousands a second it is DEBUG; the rest INFO.
        log.log(
            logging.DEBUG if status is ExecutionStatus.SUCCEEDED else logging.INFO,
            "execution %s",
            status.lower(),
            extra=extra,
        )
        # Built without validation: every field is this worker's own and typed above;
        # validating them again cost every run.
        return ExecutionResult.model_construct(
            execution_id=message.execution_id,
            job_id=message.job_id,
            worker_id=self._worker_id,
            status=status,
            message=text,
            result=result,
            started_at=started,
            ended_at=self._clock.now_ms(),
            ref=message.ref,
        )

    def _unreadable(self, unit: Unreadable, extra: dict[str, object]) -> ExecutionResult:
        log.error("cannot read this execution's dispatch message: %s", unit.error, extra=extra)
        why = clip_utf8(f"worker {self._worker_id} cannot read its dispatch: {unit.error}")
        return stand_in_result(
            unit, self._worker_id, ExecutionStatus.FAILED, why, self._clock.now_ms()
        )

    def _already_started(
        self, admitted: Admitted, extra: dict[str, object]
    ) -> ExecutionResult | None:
        message, owner_id = admitted.message, admitted.owner
        if owner_id != self._worker_id:
            if admitted.outcome is not None:
                # Its run ended on the other worker, which may have reported it while
                # the execution had no row yet (a claim that sent it rolled back): the
                # copy's report lets the row, claimed again, end.
                log.info("execution already ran on worker %s; reporting it", owner_id, extra=extra)
                return self._stored(admitted, extra)
            # A recall leaves thousands of copies behind at once, each dropped as reached.
            level = logging.DEBUG if owner_id == RECALLED else logging.INFO
            log.log(level, "execution already taken by %s; dropping copy", owner_id, extra=extra)
            return None
        local = self._local.outcome(message.execution_id)
        if local is not None:
            # This process ran it (or still was: then the copy waited for the end); its
            # result or ack went with the broker connection.
            log.info("execution came back after a reconnect; reporting its run", extra=extra)
            return local
        if admitted.outcome is not None:
            # An earlier process of this worker ran it and stored the result.
            log.info("execution ended before a restart; reporting it again", extra=extra)
            return self._stored(admitted, extra)
        # This worker's previous process took it and died before reporting: the handler
        # may have had effects, so it must not run again under the same execution id.
        log.warning("execution was interrupted by a worker restart", extra=extra)
        return self._lost(message, "interrupted: the worker stopped while running it")

    def _stored(self, admitted: Admitted, extra: dict[str, object]) -> ExecutionResult:
        """The outcome stored with the started key; LOST when it cannot be read (a newer
        worker's, or damaged): raising would send the copy back to fail again for good."""
        assert admitted.outcome is not None
        try:
            return ExecutionResult.model_validate_json(admitted.outcome)
        except ValidationError as e:
            log.error("the stored outcome of this execution cannot be read: %s", e, extra=extra)
            return self._lost(
                admitted.message,
                f"its run ended on worker {admitted.owner}, but its stored outcome cannot be "
                "read; see that worker's log",
            )

    def _lost(self, unit: Unit, text: str) -> ExecutionResult:
        return stand_in_result(
            unit, self._worker_id, ExecutionStatus.LOST, text, self._clock.now_ms()
        )

    def _call(self, message: DispatchMessage) -> tuple[Outcome, str | None, str | None]:
        fn = self._handlers.get(message.handler)
        if fn is None:
            return (
                ExecutionStatus.FAILED,
                f"handler {message.handler!r} is not registered here",
                None,
            )
        writer = self._run_logs
        run_log = None if writer is None else writer.open(message.execution_id, message.app)
        try:
            if message.traceparent is None:  # most runs: nothing to trace
                return self._call_handler(fn, message, _context(message, None, run_log))
            attributes = {
                "kairos.execution_id": message.execution_id,
                "kairos.handler": message.handler,
            }
            with self._tracing.span("kairos run", message.traceparent, attributes) as trace:
                return self._call_handler(fn, message, _context(message, trace, run_log))
        finally:
            if writer is not None:
                # Its last lines are written before its result goes: whoever sees the
                # run ended sees its whole log.
                writer.finish(run_log)

    def _call_handler(
        self, fn: HandlerFn, message: DispatchMessage, context: HandlerContext
    ) -> tuple[Outcome, str | None, str | None]:
        try:
            value = call_handler(
                fn, message.params, context, message.timeout_seconds, self.overruns
            )
        except HandlerTimeoutError as e:
            return ExecutionStatus.TIMED_OUT, str(e), None
        except BaseException as e:  # whatever a handler raises fails its run, not the worker
            log.error(
                "handler %s raised %s",
                message.handler,
                type(e).__name__,
                exc_info=e,
                extra={"job_id": message.job_id, "execution_id": message.execution_id},
            )
            if context.run_log is not None:
                context.run_log.append("ERROR", "".join(traceback.format_exception(e)).rstrip())
            return ExecutionStatus.FAILED, describe_error(e), None
        rendered = render_result(value)
        return ExecutionStatus.SUCCEEDED, rendered.note, rendered.result


def _context(message: DispatchMessage, trace: str | None, run_log: RunLog | None) -> HandlerContext:
    return HandlerContext(
        message.job_id, message.execution_id, message.attempt, message.trigger_time, trace, run_log
    )
