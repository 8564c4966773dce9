"""The pooled consumer on real RabbitMQ: a prefetch window wider than the pool."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest
from pika.adapters.blocking_connection import BlockingConnection

from common.broker import BatchPublisher, OutgoingMessage, connect
from common.config import StoreSettings
from common.pooled_consumer import PooledConsumer, unchanged
from common.topology import DISPATCH_EXCHANGE, declare_core, declare_worker_queue


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

    consumer = PooledConsumer(connection, queue, 1, unchanged, run, flushed.flush, prefetch=3)
    consumer.start()
    pump(connection, lambda: len(flushed) == 3)
    consumer.close()
    assert sorted(flushed) == [b"0", b"1", b"2"]
    assert most[0] == 1
    assert ready(connection, queue) == 0


def test_deliveries_still_waiting_go_back_to_the_queue_when_consuming_stops(
    broker: tuple[BlockingConnection, str],
) -> None:
    connection, queue = broker
    release = threading.Event()
    started: list[bytes] = []
    flushed = Flushed()

    def run(body: bytes) -> bytes:
        started.append(body)
        release.wait(10)
        return body

    consumer = PooledConsumer(connection, queue, 1, unchanged, run, flushed.flush, prefetch=3)
    consumer.start()
    pump(connection, lambda: len(started) == 1 and consumer.active == 1)
    pump(connection, lambda: ready(connection, queue) == 0)
    consumer.stop_consuming()
    release.set()
    pump(connection, lambda: consumer.active == 0)
    consumer.close()
    assert flushed == started
    assert ready(connection, queue) == 2


def test_closing_releases_admitted_runs_no_pool_thread_picked_up(
    broker: tuple[BlockingConnection, str],
) -> None:
    connection, queue = broker
    released: list[bytes] = []
    consumer = PooledConsumer(
        connection,
        queue,
        3,
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
    consumer._pool.shutdown()
    consumer._pool = busy
    consumer.start()
    pump(connection, lambda: consumer.active == 3)
    consumer.close()
    hold.set()
    assert sorted(released) == [b"0", b"1", b"2"]
