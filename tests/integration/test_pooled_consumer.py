"""The pooled consumer on real RabbitMQ: a prefetch window wider than the pool."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from pika.adapters.blocking_connection import BlockingConnection

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.config import StoreSettings
from common.consumer import outcome_flush
from common.consumer import pooled as pooled_consumer
from common.consumer.pooled import PooledConsumer
from common.consumer.unit_packing import ONE_PER_MESSAGE, Packing, unchanged
from common.consumer.work import ConsumerSettings, ConsumerWork
from common.topology import DISPATCH_EXCHANGE, declare_core, declare_worker_queue

U = TypeVar("U")
P = TypeVar("P")
T = TypeVar("T")


def pooled(
    connection: BlockingConnection,
    queue: str,
    pool_size: int,
    packing: Packing[U],
    prepare: Callable[[Sequence[U]], Sequence[P]],
    run: Callable[[P], T],
    flush: Callable[[Sequence[T]], Sequence[OutgoingMessage]],
    prefetch: int | None = None,
    ack_deadline: float | None = None,
    hold_unrouted: bool = False,
    release: Callable[[Sequence[P]], object] | None = None,
    redelivered: Callable[[Sequence[U]], object] | None = None,
) -> PooledConsumer[U, P, T]:
    """A consumer of ``queue`` with the steps given, in the order the tests name them."""
    return PooledConsumer(
        connection,
        ConsumerSettings(queue, pool_size, prefetch, ack_deadline, hold_unrouted),
        ConsumerWork(packing, prepare, run, flush, release=release, redelivered=redelivered),
    )


@pytest.fixture
def broker(namespace: StoreSettings) -> Iterator[tuple[BlockingConnection, str]]:
    connection = connect(namespace, "test")
    channel = connection.channel()
    declare_core(channel)
    queue = declare_worker_queue(channel, "w1")
    BatchPublisher(connection.channel()).publish(
        [OutgoingMessage(DISPATCH_EXCHANGE, "w1", str(i).encode(), f"m{i}") for i in range(3)]
    )
    try:
        yield connection, queue
    finally:
        if connection.is_open:
            connection.close()


def pump(connection: BlockingConnection, until: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, "timed out"
        connection.process_data_events(time_limit=0.05)


def ready(connection: BlockingConnection, queue: str) -> int:
    channel = connection.channel()
    count = int(channel.queue_declare(queue, passive=True).method.message_count)
    channel.close()
    return count


class Gate:
    """A run that records each unit it takes and holds it until ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.taken: list[bytes] = []

    def run(self, unit: bytes) -> bytes:
        self.taken.append(unit)
        self.release.wait(10)
        return unit


class Flushed(list[bytes]):
    """The outcomes a consumer flushed; its ``flush`` publishes nothing."""

    def flush(self, outcomes: Sequence[bytes]) -> list[OutgoingMessage]:
        self.extend(outcomes)
        return []


def test_runs_start_only_in_free_slots_while_the_window_holds_more(
    broker: tuple[BlockingConnection, str],
) -> None:
    connection, queue = broker
    running, most = [0], [0]
    lock = threading.Lock()
    flushed = Flushed()

    def run(body: bytes) -> bytes:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return body

    consumer = pooled(
        connection, queue, 1, ONE_PER_MESSAGE, unchanged, run, flushed.flush, prefetch=3
    )
    consumer.start()
    pump(connection, lambda: len(flushed) == 3)
    consumer.close()
    assert sorted(flushed) == [b"0", b"1", b"2"]
    assert most[0] == 1
    assert ready(connection, queue) == 0


def test_a_runs_duration_is_the_time_it_held_its_slot_not_its_outcomes_flush(
    broker: tuple[BlockingConnection, str],
) -> None:
    # The heartbeat reports the mean of these, and the leader bounds the worker's queue
    # by what its slots start within the horizon: a slot frees when the run ends, so a
    # slow flush (a busy broker) must not read as slow runs and starve the queue.
    connection, queue = broker
    flushed = Flushed()

    def slow_flush(outcomes: Sequence[bytes]) -> list[OutgoingMessage]:
        time.sleep(0.3)
        return flushed.flush(outcomes)

    consumer = pooled(connection, queue, 3, ONE_PER_MESSAGE, unchanged, lambda b: b, slow_flush)
    consumer.start()
    pump(connection, lambda: len(flushed) == 3)
    consumer.close()
    durations = [seconds for _, seconds in consumer.stats.durations]
    assert len(durations) == 3
    assert max(durations) < 0.2, durations


def test_deliveries_still_waiting_go_back_to_the_queue_when_consuming_stops(
    broker: tuple[BlockingConnection, str],
) -> None:
    connection, queue = broker
    gate = Gate()
    flushed = Flushed()
    consumer = pooled(
        connection, queue, 1, ONE_PER_MESSAGE, unchanged, gate.run, flushed.flush, prefetch=3
    )
    consumer.start()
    pump(connection, lambda: len(gate.taken) == 1 and consumer.active == 1)
    pump(connection, lambda: ready(connection, queue) == 0)
    consumer.stop_consuming()
    gate.release.set()
    pump(connection, lambda: consumer.active == 0)
    consumer.close()
    assert flushed == gate.taken
    assert ready(connection, queue) == 2


def test_closing_releases_admitted_runs_no_pool_thread_picked_up(
    broker: tuple[BlockingConnection, str],
) -> None:
    connection, queue = broker
    released: list[bytes] = []
    consumer = pooled(
        connection,
        queue,
        3,
        ONE_PER_MESSAGE,
        unchanged,
        lambda body: body,
        Flushed().flush,
        prefetch=3,
        release=released.extend,
    )
    # Every pool thread busy elsewhere: what is admitted now waits in the pool's queue,
    # as it does for a moment between admission and a thread taking it.
    hold = threading.Event()
    busy = ThreadPoolExecutor(max_workers=1)
    busy.submit(hold.wait, 10)
    consumer._runs._pool.shutdown()
    consumer._runs._pool = busy
    consumer.start()
    pump(connection, lambda: consumer.active == 3)
    consumer.close()
    hold.set()
    assert sorted(released) == [b"0", b"1", b"2"]


class Commas:
    """A packing for tests: a body is its units joined by commas."""

    def unpack(self, body: bytes) -> list[bytes]:
        if body == b"unreadable":
            raise ValueError("cannot read")
        return body.split(b",")

    def repack(self, units: Sequence[bytes]) -> bytes:
        return b",".join(units)


Pack = tuple[BlockingConnection, str, StoreSettings]


def left_in_queue(pack: Pack) -> list[bytes]:
    """Close the consumer's connection (unacked deliveries go back), then read the queue."""
    connection, queue, namespace = pack
    connection.close()
    reader = connect(namespace, "reader")
    channel = reader.channel()
    bodies: list[bytes] = []
    while True:
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            reader.close()
            return bodies
        bodies.append(body)


@pytest.fixture
def one_pack(namespace: StoreSettings) -> Iterator[Pack]:
    connection = connect(namespace, "test")
    channel = connection.channel()
    declare_core(channel)
    queue = declare_worker_queue(channel, "w1")
    BatchPublisher(connection.channel()).publish(
        [OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"a,b,c", "pack")]
    )
    try:
        yield connection, queue, namespace
    finally:
        if connection.is_open:
            connection.close()


def test_a_pack_is_acked_once_every_unit_in_it_ran_and_was_flushed(one_pack: Pack) -> None:
    connection, queue, _ = one_pack
    flushed = Flushed()
    consumer = pooled(connection, queue, 1, Commas(), unchanged, lambda unit: unit, flushed.flush)
    consumer.start()
    pump(connection, lambda: len(flushed) == 3 and consumer.active == 0)
    consumer.close()
    assert flushed == [b"a", b"b", b"c"]
    assert left_in_queue(one_pack) == []


def test_a_pack_with_a_unit_not_flushed_is_not_acked(one_pack: Pack) -> None:
    connection, queue, _ = one_pack
    release = threading.Event()
    flushed = Flushed()

    def run(unit: bytes) -> bytes:
        if unit == b"c":
            release.wait(10)
        return unit

    consumer = pooled(connection, queue, 1, Commas(), unchanged, run, flushed.flush)
    consumer.start()
    pump(connection, lambda: flushed == [b"a", b"b"] and consumer.active == 1)
    consumer.close()
    release.set()
    assert left_in_queue(one_pack) == [b"a,b,c"]


def test_stopping_sends_the_unstarted_rest_of_a_pack_back_as_a_message_of_its_own(
    one_pack: Pack,
) -> None:
    connection, queue, _ = one_pack
    gate = Gate()
    flushed = Flushed()

    consumer = pooled(connection, queue, 1, Commas(), unchanged, gate.run, flushed.flush)
    consumer.start()
    pump(connection, lambda: consumer.active == 1)
    consumer.stop_consuming()
    gate.release.set()
    pump(connection, lambda: consumer.active == 0)
    consumer.close()
    assert flushed == [b"a"]
    # The pack itself was acked: only its rest is queued, once.
    assert left_in_queue(one_pack) == [b"b,c"]


def test_the_ack_deadline_gives_back_units_that_waited_too_long_and_acks_the_running_one(
    one_pack: Pack, caplog: pytest.LogCaptureFixture
) -> None:
    connection, queue, _ = one_pack
    gate = Gate()
    caplog.set_level(logging.INFO, logger=pooled_consumer.__name__)

    consumer = pooled(
        connection, queue, 1, Commas(), unchanged, gate.run, Flushed().flush, ack_deadline=0.3
    )
    consumer.start()
    # The sweep that finds the pack past its deadline gives its rest back, then acks it.
    pump(connection, lambda: "acked 1 long-running deliveries early" in caplog.text, 30)
    consumer.close()
    gate.release.set()
    assert gate.taken == [b"a"]
    # "b,c" waited past the deadline behind "a" and went back as a message of its own;
    # "a" ran past it and its pack was acked early: it does not come back.
    assert left_in_queue(one_pack) == [b"b,c"]


def test_a_message_that_cannot_be_read_is_dropped_not_requeued(namespace: StoreSettings) -> None:
    connection = connect(namespace, "test")
    channel = connection.channel()
    declare_core(channel)
    queue = declare_worker_queue(channel, "w1")
    BatchPublisher(connection.channel()).publish(
        [
            OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"unreadable", "bad"),
            OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"x", "good"),
        ]
    )
    flushed = Flushed()
    consumer = pooled(connection, queue, 2, Commas(), unchanged, lambda unit: unit, flushed.flush)
    consumer.start()
    pump(connection, lambda: flushed == [b"x"] and consumer.active == 0)
    consumer.close()
    assert left_in_queue((connection, queue, namespace)) == []


def test_a_run_that_ends_while_consuming_stops_starts_nothing_more(
    namespace: StoreSettings,
) -> None:
    connection = connect(namespace, "test")
    channel = connection.channel()
    declare_core(channel)
    queue = declare_worker_queue(channel, "w1")
    BatchPublisher(connection.channel()).publish(
        [
            OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"a,b", "p1"),
            OutgoingMessage(DISPATCH_EXCHANGE, "w1", b"c", "p2"),
        ]
    )
    gate = Gate()
    flushed = Flushed()

    consumer = pooled(
        connection, queue, 1, Commas(), unchanged, gate.run, flushed.flush, prefetch=2
    )
    consumer.start()
    pump(connection, lambda: consumer.active == 1 and ready(connection, queue) == 0)
    # "a" ends just before consuming stops: its hand-back is queued, not yet handled,
    # and runs while the rest of "a,b" is published (pika serves callbacks meanwhile).
    gate.release.set()
    deadline = time.monotonic() + 5
    while not consumer._runs._finished and time.monotonic() < deadline:
        time.sleep(0.01)
    consumer.stop_consuming()
    pump(connection, lambda: consumer.active == 0)
    consumer.close()
    assert gate.taken == [b"a"]
    assert flushed == [b"a"]
    assert sorted(left_in_queue((connection, queue, namespace))) == [b"b", b"c"]


def test_a_run_that_raised_goes_back_alone_and_its_pack_is_acked(one_pack: Pack) -> None:
    connection, queue, _ = one_pack
    flushed = Flushed()

    def run(unit: bytes) -> bytes:
        if unit == b"b":
            raise RuntimeError("outside the handler's own error handling")
        return unit

    consumer = pooled(connection, queue, 1, Commas(), unchanged, run, flushed.flush)
    consumer.start()
    pump(connection, lambda: flushed == [b"a", b"c"] and consumer.active == 0)
    consumer.stop_consuming()
    consumer.close()
    assert left_in_queue(one_pack) == [b"b"]


def test_the_copy_of_a_run_that_raised_is_taken_as_a_redelivery(one_pack: Pack) -> None:
    # Its run may have had effects before it raised (a worker's handler ran, then
    # stamping its end failed): the worker must guard the copy as it guards the broker's
    # redeliveries, or it runs again when Redis lost its started key meanwhile.
    connection, queue, _ = one_pack
    flushed = Flushed()
    raised: list[bytes] = []
    again: list[bytes] = []

    def run(unit: bytes) -> bytes:
        if unit == b"b" and not raised:
            raised.append(unit)
            raise RuntimeError("outside the handler's own error handling")
        return unit

    consumer = pooled(
        connection, queue, 1, Commas(), unchanged, run, flushed.flush, redelivered=again.extend
    )
    consumer.start()
    pump(connection, lambda: sorted(flushed) == [b"a", b"b", b"c"] and consumer.active == 0)
    consumer.stop_consuming()
    consumer.close()
    assert again == [b"b"]


def test_units_whose_prepare_fails_wait_for_a_backoff_instead_of_looping_through_the_queue(
    broker: tuple[BlockingConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Redis down: a worker's admit fails. Given back, the deliveries came straight back
    # and failed again, a tight loop of nacks; held, they wait for the backoff.
    monkeypatch.setattr(pooled_consumer, "backoff_seconds", lambda failures: 3600.0)
    connection, queue = broker
    calls: list[int] = []
    store_up = [False]

    def prepare(units: Sequence[bytes]) -> Sequence[bytes]:
        calls.append(len(units))
        if not store_up[0]:
            raise ConnectionError("Redis is down")
        return units

    flushed = Flushed()
    consumer = pooled(
        connection, queue, 3, ONE_PER_MESSAGE, prepare, lambda body: body, flushed.flush
    )
    consumer.start()
    pump(connection, lambda: consumer.waiting == 3)
    connection.process_data_events(time_limit=0.5)
    assert len(calls) <= 3, f"prepare was tried {len(calls)} times: the units looped"
    assert consumer.held == 3 and flushed == []
    store_up[0] = True
    consumer._retry_prepare()  # the backoff has passed
    pump(connection, lambda: len(flushed) == 3)
    consumer.close()
    assert sorted(flushed) == [b"0", b"1", b"2"]


def test_output_no_queue_takes_holds_its_delivery_until_it_lands(
    broker: tuple[BlockingConnection, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker's results exchange with no queue bound: the broker returns the results,
    # and acking their deliveries would lose them silently.
    monkeypatch.setattr(outcome_flush, "backoff_seconds", lambda failures: 0.2)
    connection, queue = broker

    flushed: list[bytes] = []

    def flush(outcomes: Sequence[bytes]) -> list[OutgoingMessage]:
        flushed.extend(outcomes)
        return [OutgoingMessage(DISPATCH_EXCHANGE, "w-later", b"+".join(outcomes), "out")]

    consumer = pooled(
        connection, queue, 3, ONE_PER_MESSAGE, unchanged, lambda b: b, flush, hold_unrouted=True
    )
    consumer.start()
    pump(connection, lambda: len(flushed) == 3 and consumer.active == 0)
    for _ in range(5):
        connection.process_data_events(time_limit=0.1)
    assert consumer.held == 3, "deliveries were acked while their output found no queue"
    later = declare_worker_queue(connection.channel(), "w-later")
    pump(connection, lambda: consumer.held == 0)
    consumer.close()
    assert ready(connection, later) >= 1
    assert ready(connection, queue) == 0


def test_a_flush_without_output_commits_nothing_and_acks_every_delivery(
    namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = connect(namespace, "test")
    channel = connection.channel()
    declare_core(channel)
    queue = declare_worker_queue(channel, "w1")
    BatchPublisher(connection.channel()).publish(
        [OutgoingMessage(DISPATCH_EXCHANGE, "w1", str(i).encode(), f"m{i}") for i in range(6)]
    )
    commits: list[int] = []
    real_publish = BatchPublisher.publish

    def publish(self: BatchPublisher, messages: Sequence[OutgoingMessage]) -> set[str]:
        commits.append(len(messages))
        return real_publish(self, messages)

    monkeypatch.setattr(BatchPublisher, "publish", publish)
    flushed = Flushed()
    consumer = pooled(
        connection, queue, 3, ONE_PER_MESSAGE, unchanged, lambda unit: unit, flushed.flush
    )
    consumer.start()
    pump(connection, lambda: len(flushed) == 6 and consumer.active == 0)
    pump(connection, lambda: consumer.held == 0)
    consumer.close()
    # No broker round trip for a batch with nothing to publish; every delivery acked.
    assert commits == []
    assert left_in_queue((connection, queue, namespace)) == []


def test_more_queues_are_consumed_on_the_channel_each_held_to_its_own_prefetch(
    broker: tuple[BlockingConnection, str],
) -> None:
    """The worker queue holds 3 messages, a second queue 5: with prefetches of 2 and 1,
    three units run at once in a pool of 8, and the rest wait in their queues."""
    connection, queue = broker
    channel = connection.channel()
    channel.queue_declare("second", durable=True)
    BatchPublisher(connection.channel()).publish(
        [OutgoingMessage("", "second", f"s{i}".encode(), f"s{i}") for i in range(5)]
    )
    gate, flushed = Gate(), Flushed()
    consumer = PooledConsumer(
        connection,
        ConsumerSettings(queue, 8, prefetch=2, more_queues=(("second", 1),)),
        ConsumerWork(ONE_PER_MESSAGE, unchanged, gate.run, flushed.flush),
    )
    consumer.start()
    pump(connection, lambda: len(gate.taken) == 3)
    connection.process_data_events(time_limit=0.3)
    assert len(gate.taken) == 3 and sum(b.startswith(b"s") for b in gate.taken) == 1
    assert (ready(connection, queue), ready(connection, "second")) == (1, 4)
    gate.release.set()
    pump(connection, lambda: len(flushed) == 8)
    assert sorted(flushed) == sorted([b"0", b"1", b"2"] + [f"s{i}".encode() for i in range(5)])
    consumer.stop_consuming()
    pump(connection, lambda: consumer.held == 0)
    consumer.close()
