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

import sqlalchemy as sa
from store_timing import ROUNDS, compared, run

from common.db.workers import Heartbeat, MySqlWorkerStore, MySqlWorkerTransactions
from common.states import WorkerState


def beat(worker_id: str, at_ms: int) -> Heartbeat:
    """A heartbeat of an idle worker, sent at ``at_ms``."""
    state = WorkerState.ACTIVE
    return Heartbeat(worker_id, "bench", 1, 8, 0, 90, 3, ("demo.noop",), state, 0, at_ms)


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
    return figures | compared(pairs, calls)


if __name__ == "__main__":
    run(__doc__, "workers", measure, MySqlWorkerTransactions, MySqlWorkerStore)
