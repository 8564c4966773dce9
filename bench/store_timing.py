"""Timing a store's hot paths through its ``StoreTransactions`` against the same store
methods on a connection opened by hand: interleaved rounds, medians, and the store's
own cost on connections that cost nothing (``bench/worker_store.py``,
``bench/app_store.py``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from collections.abc import Callable
from typing import TypeVar, cast

import sqlalchemy as sa
from harness import scratch_engine

from common.db.store_transactions import EngineStores

ROUNDS = 10
S = TypeVar("S")

Call = Callable[[int], None]
Measure = Callable[[sa.Engine, int, int], dict[str, object]]


def per_call_us(call: Call, calls: int) -> float:
    """Microseconds one of ``calls`` calls took on average."""
    began = time.perf_counter()
    for n in range(calls):
        call(n)
    return (time.perf_counter() - began) / calls * 1e6


def paired(through: Call, by_hand: Call, calls: int, first: int) -> tuple[float, float]:
    """One round of each way (by hand first when ``first``), so that neither always
    runs on the heels of the other."""
    if first:
        hand = per_call_us(by_hand, calls)
        return per_call_us(through, calls), hand
    store = per_call_us(through, calls)
    return store, per_call_us(by_hand, calls)


def compared(pairs: dict[str, tuple[Call, Call]], calls: int) -> dict[str, object]:
    """For each named path, the medians of ``ROUNDS`` interleaved rounds each way and
    their ratio (through the store / by hand)."""
    figures: dict[str, object] = {}
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


def run(
    doc: str,
    rows: str,
    measure: Measure,
    stores: Callable[[sa.Engine], EngineStores[S]],
    make: Callable[[sa.engine.Connection], object],
) -> None:
    """A benchmark's ``main``: ``measure(engine, --ROWS, --calls)`` on a scratch
    database named for ``rows``, then the store's own cost; one JSON line."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument(f"--{rows}", type=int, default=50)
    parser.add_argument("--calls", type=int, default=2_000)
    args = parser.parse_args()
    with scratch_engine(f"bench_{rows}_store_") as engine:
        figures = measure(engine, getattr(args, rows), args.calls)
    figures["no_io"] = wrapper_us(stores, make, 100_000)
    print(json.dumps(figures))


def wrapper_us(
    stores: Callable[[sa.Engine], EngineStores[S]],
    make: Callable[[sa.engine.Connection], object],
    calls: int,
) -> dict[str, float]:
    """Microseconds a store handed out by ``reading()`` takes against one built by hand
    with ``make``, on connections that cost nothing."""
    engine = cast(sa.Engine, StubEngine())
    store = stores(engine)

    def through(_: int) -> None:
        with store.reading():
            pass

    def by_hand(_: int) -> None:
        with engine.connect() as conn:
            make(conn)

    return {
        "store_us": round(per_call_us(through, calls), 2),
        "by_hand_us": round(per_call_us(by_hand, calls), 2),
    }
