"""Worker store: what handing out a store per connection costs on the two hot paths.

The heartbeat's upsert and the worker directory's reload go through
``MySqlWorkerTransactions`` (``transaction()`` / ``reading()``); their SQL is the
store's own. This times each path through it against the same store methods on a
connection opened by hand (``engine.begin()`` / ``engine.connect()``), in interleaved
rounds in one run, in a namespace of its own with ``--workers`` worker rows.

    .venv/bin/python bench/worker_store.py --workers 50 --calls 2000

The last line printed is one JSON object: microseconds per call (median of the rounds)
each way, and their ratio (through the store / by hand). Rounds alternate which way
goes first. ``no_io`` is the same pair on connections that cost nothing: the store's
own cost per call.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import cast

import sqlalchemy as sa
from harness import scratch_engine

from common.db.workers import Heartbeat, MySqlWorkerStore, MySqlWorkerTransactions
from common.states import WorkerState

ROUNDS = 10


def beat(worker_id: str, at_ms: int) -> Heartbeat:
    """A heartbeat of an idle worker, sent at ``at_ms``."""
    state = WorkerState.ACTIVE
    return Heartbeat(worker_id, "bench", 1, 8, 0, 90, 3, ("demo.noop",), state, 0, at_ms)


def per_call_us(call: Callable[[int], None], calls: int) -> float:
    """Microseconds one of ``calls`` calls took on average."""
    began = time.perf_counter()
    for n in range(calls):
        call(n)
    return (time.perf_counter() - began) / calls * 1e6


def paired(
    through: Callable[[int], None], by_hand: Callable[[int], None], calls: int, first: int
) -> tuple[float, float]:
    """One round of each way (by hand first when ``first``), so that neither always
    runs on the heels of the other."""
    if first:
        hand = per_call_us(by_hand, calls)
        return per_call_us(through, calls), hand
    store = per_call_us(through, calls)
    return store, per_call_us(by_hand, calls)


def measure(engine: sa.Engine, workers: int, calls: int) -> dict[str, object]:
    """Interleaved rounds of each path, through the store and by hand."""
    store = MySqlWorkerTransactions(engine)
    for n in range(workers):
        with store.transaction() as s:
            s.upsert_heartbeat(beat(f"w{n}", 1))

    def heartbeat_store(n: int) -> None:
        with store.transaction() as s:
            s.upsert_heartbeat(beat("w0", n))

    def heartbeat_by_hand(n: int) -> None:
        with engine.begin() as conn:
            MySqlWorkerStore(conn).upsert_heartbeat(beat("w0", n))

    def reload_store(_: int) -> None:
        with store.reading() as s:
            s.fresh_workers(0)
            s.queued_by_worker()

    def reload_by_hand(_: int) -> None:
        with engine.connect() as conn:
            s = MySqlWorkerStore(conn)
            s.fresh_workers(0)
            s.queued_by_worker()

    pairs = {
        "heartbeat": (heartbeat_store, heartbeat_by_hand),
        "reload": (reload_store, reload_by_hand),
    }
    figures: dict[str, object] = {"workers": workers, "calls": calls, "rounds": ROUNDS}
    for name, (through, by_hand) in pairs.items():
        rounds = [paired(through, by_hand, calls, first=n % 2) for n in range(ROUNDS)]
        store_us = statistics.median(r[0] for r in rounds)
        hand_us = statistics.median(r[1] for r in rounds)
        figures[name] = {
            "store_us": round(store_us, 1),
            "by_hand_us": round(hand_us, 1),
            "ratio": round(store_us / hand_us, 3),
        }
    return figures


class StubEngine:
    """An engine whose connections cost nothing: what is left is the store's own cost."""

    def connect(self) -> contextlib.nullcontext[object]:
        return contextlib.nullcontext(object())


def wrapper_us(calls: int) -> dict[str, float]:
    """Microseconds a store handed out by ``reading()`` takes against one built by hand,
    on connections that cost nothing."""
    engine = cast(sa.Engine, StubEngine())
    store = MySqlWorkerTransactions(engine)

    def through(_: int) -> None:
        with store.reading():
            pass

    def by_hand(_: int) -> None:
        with engine.connect() as conn:
            MySqlWorkerStore(conn)

    return {
        "store_us": round(per_call_us(through, calls), 2),
        "by_hand_us": round(per_call_us(by_hand, calls), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    with scratch_engine("bench_worker_store_") as engine:
        figures = measure(engine, args.workers, args.calls)
    figures["no_io"] = wrapper_us(100_000)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
