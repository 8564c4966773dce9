"""Consumes ``kairos.results`` in batches: record, publish callbacks, then ack the batch."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.alerts.rules import RuleSource
from common.broker import BatchPublisher, OutgoingMessage, Publisher, connect
from common.clock import ClusterClock
from common.config import DispatcherSettings
from common.messages import ExecutionResult, ResultBatch, read_message
from common.metrics import RESULTS_SET_ASIDE
from common.result_messages import results_message
from common.runtime import keep_serving
from common.slots import ResultsLag
from common.topology import RESULTS_DEAD_QUEUE, RESULTS_QUEUE, declare_core
from services.dispatcher.outcomes.callbacks import (
    leave_recorded_before_to_the_sweep,
    publish_deliveries,
)
from services.dispatcher.outcomes.recording import Recorded, record_each_alone_if_need_be
from services.dispatcher.outcomes.started_keys import StartedKeys

log = logging.getLogger(__name__)

GATHER_MESSAGES = 50
# After a batch with results deferred (their rows held by another transaction), the
# consumer lets this long pass before the next batch, so that the deferred results,
# back at the queue's tail, do not come round again at once while the rows stay held.
DEFERRED_PAUSE_S = 0.5


@dataclass
class ParsedResults:
    """The results a batch of messages carries, and the bodies that could not be read."""

    results: list[ExecutionResult] = field(default_factory=list)
    unreadable: list[bytes] = field(default_factory=list)


def parse_results(bodies: list[bytes]) -> ParsedResults:
    """Every result in a list of ResultBatch bodies; unreadable bodies are kept apart
    (a body with text UTF-8 cannot carry is read with it replaced)."""
    parsed = ParsedResults()
    for body in bodies:
        batch = read_message(ResultBatch, body)
        if batch is None:
            log.error("setting aside a results message that cannot be read: %r", body[:200])
            parsed.unreadable.append(body)
        else:
            parsed.results.extend(batch.results)
    return parsed


def deferred_again(bodies: Sequence[bytes]) -> list[OutgoingMessage]:
    """Messages that put ``bodies`` back at the tail of the results queue."""
    return [
        OutgoingMessage("", RESULTS_QUEUE, body, f"deferred-{n}") for n, body in enumerate(bodies)
    ]


def set_aside(bodies: Sequence[bytes]) -> list[OutgoingMessage]:
    """Messages that park ``bodies`` in the results dead-letter queue for an operator."""
    return [
        OutgoingMessage("", RESULTS_DEAD_QUEUE, body, f"set-aside-{n}")
        for n, body in enumerate(bodies)
    ]


@dataclass(frozen=True, slots=True)
class _Taken:
    """A results message as taken from the queue: its tag, body, and whether the broker
    handed it out before (an earlier consumer stopped before its ack)."""

    tag: int
    body: bytes
    redelivered: bool


class ResultsConsumer:
    """Runs in its own thread with its own connection; every dispatcher runs one."""

    def __init__(
        self,
        settings: DispatcherSettings,
        engine: Engine,
        clock: ClusterClock,
        name: str,
        started: StartedKeys | None = None,
        lag: ResultsLag | None = None,
        alerts: RuleSource | None = None,
    ) -> None:
        self._settings = settings
        # The alert rules the runs' ends fire (cached, read again every few seconds).
        self._alerts = alerts
        self._engine = engine
        self._clock = clock
        self._name = name
        self._started = started
        # Read by the leader's worker view: the in-flight count it bounds queues by
        # still holds the runs whose results are on their way (``common.slots``).
        self.lag = lag or ResultsLag()
        self._pending: list[_Taken] = []

    def run(self, stop: threading.Event) -> None:
        """Consume until ``stop`` is set; reconnect after broker or database errors."""
        keep_serving("results consumer", lambda: self._consume(stop), stop)

    def _consume(self, stop: threading.Event) -> None:
        connection = connect(self._settings, f"kairos dispatcher {self._name} results")
        try:
            channel = connection.channel()
            declare_core(channel)
            channel.basic_qos(prefetch_count=self._settings.results_prefetch)
            publisher = BatchPublisher(connection.channel())
            self._pending = []
            channel.basic_consume(RESULTS_QUEUE, self._on_message)
            while not stop.is_set():
                connection.process_data_events(time_limit=0 if self._pending else 0.1)
                if self._pending:
                    self._gather(connection)
                    # Taken out before the work: publishing the callbacks lets pika
                    # deliver more results on this connection, and those belong to
                    # the next batch, not to this one's ack.
                    batch, self._pending = self._pending, []
                    deferred = self._handle(publisher, batch)
                    channel.basic_ack(batch[-1].tag, multiple=True)
                    if deferred:
                        connection.process_data_events(time_limit=DEFERRED_PAUSE_S)
        finally:
            if connection.is_open:
                connection.close()

    def _leave_to_the_sweep(self, batch: list[_Taken], recorded: Recorded) -> None:
        """Hand the sweep the callbacks of results that came back from the broker
        recorded already: the consumer that recorded them may have stopped before its
        publish."""
        again = parse_results([taken.body for taken in batch if taken.redelivered]).results
        if not again:
            return
        settled_now = {d.execution_id for d in recorded.deliveries}
        settled_now |= {r.execution_id for r in recorded.deferred + recorded.set_aside}
        before = {r.execution_id for r in again} - settled_now
        leave_recorded_before_to_the_sweep(self._engine, self._clock, before)

    def _gather(self, connection: BlockingConnection) -> None:
        """Let a few more results arrive before writing: one transaction for many result
        messages costs about what one for a few costs."""
        deadline = time.monotonic() + self._settings.results_batch_wait_ms / 1000
        while len(self._pending) < GATHER_MESSAGES and time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.002)

    def _on_message(self, _ch: Any, method: Any, _props: Any, body: bytes) -> None:
        self._pending.append(_Taken(int(method.delivery_tag), body, bool(method.redelivered)))

    def _handle(self, publisher: Publisher, batch: list[_Taken]) -> int:
        """Record a batch; returns how many of its results were deferred."""
        parsed = parse_results([taken.body for taken in batch])
        recorded = record_each_alone_if_need_be(
            self._engine, self._clock, parsed.results, self._alerts
        )
        now = self._clock.now_ms()
        self.lag.observe([now - r.ended_at for r in parsed.results])
        publish_deliveries(self._engine, publisher, self._clock, recorded.deliveries)
        self._leave_to_the_sweep(batch, recorded)
        # Parked before the batch's ack: nothing a worker reported is ever dropped.
        unrecorded = [results_message(self._name, [r]).body for r in recorded.set_aside]
        parked = parsed.unreadable + unrecorded
        if parked:
            publisher.publish(set_aside(parked))
            RESULTS_SET_ASIDE.inc(len(parked))
        if self._started is not None:
            unsettled = {r.execution_id for r in recorded.deferred + recorded.set_aside}
            self._started.recorded(
                r.execution_id for r in parsed.results if r.execution_id not in unsettled
            )
        # Put back before the batch's ack, as the parked ones: recorded later.
        if recorded.deferred:
            later = [results_message(self._name, [r]).body for r in recorded.deferred]
            publisher.publish(deferred_again(later))
        return len(recorded.deferred)
