"""The recall on real MySQL and Redis: the unstarted end of an overfull worker queue goes
back to the firer, fenced, and what a worker took or another transaction holds stays
(``services/dispatcher/upkeep/recall.py``; the whole path on a stack:
e2e/test_fair_share.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.executions_with_job import SLOT_WAIT
from common.db.rescue_store import MySqlRescueTransactions
from common.keys import RedisKeys
from common.loadbalance import WorkerLoad
from common.started_marks import RECALLED, RedisStartedMarks
from services.dispatcher.upkeep.recall import Recall, RecallSettings
from tests.integration.helpers import make_app
from tests.integration.test_held_rows import holding
from tests.integration.test_rescue import queued_on

SLOW = "report.slow"


@dataclass
class View:
    """One live worker "w1" whose runs of ``SLOW`` take ten places, against a bound of
    20; what the recall counted afresh."""

    queued: int
    counted: list[tuple[str, int, float, int]] = field(default_factory=list)

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        load = WorkerLoad("w1", self.queued, 5.0, 90.0, frozenset({SLOW}), room=0)
        load.bound, load.queued, load.costs, load.unit_ms = 20, self.queued, {SLOW: 10}, 5.0
        return [load]

    def repriced(self, worker_id: str, queued: int, extra_ms: float, recalled: int) -> None:
        self.counted.append((worker_id, queued, extra_ms, recalled))


def rows(engine: Engine) -> dict[str, tuple[str, str | None, str | None, int | None]]:
    """Each execution's status, worker, message and dispatched_at."""
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT execution_id, status, worker_id, message, dispatched_at FROM executions"
            )
        ).all()
    return {str(r[0]): (str(r[1]), r[2], r[3], r[4]) for r in found}


def test_the_unstarted_end_of_an_overfull_queue_goes_back_fenced(
    engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    make_app(engine)
    ids = [f"e{n:02d}" for n in range(12)]
    for execution_id in ids:
        queued_on(engine, execution_id, "w1", handler=SLOW)
    with engine.begin() as conn:  # sent in order, one a millisecond
        conn.execute(sa.text("UPDATE executions SET dispatched_at = 100 + id"))
    keys = RedisKeys(namespace.namespace)
    marks = RedisStartedMarks(redis_client, keys)
    redis_client.set(keys.execution_started("e11"), "w1")  # the worker took the last one
    view = View(queued=12)
    recall = Recall(MySqlRescueTransactions(engine), marks, view, RecallSettings(60))
    # 120 places against a bound of 20: the last 10 sent go back, less what is taken or held.
    held = holding(
        engine, "SELECT id FROM executions WHERE execution_id = :e FOR UPDATE", {"e": "e10"}
    )
    try:
        assert recall.recall_surplus() == 8
    finally:
        held.rollback()
        held.close()
    found = rows(engine)
    back = ids[2:10]
    for execution_id in back:
        status, worker, message, dispatched = found[execution_id]
        assert (status, worker, message) == ("SCHEDULED", None, SLOT_WAIT), execution_id
        assert dispatched is not None, "dispatched_at tells the firer to lift the fence"
        assert marks.read_runs([execution_id])[0].owner == RECALLED
    for execution_id in [*ids[:2], "e10", "e11"]:
        assert found[execution_id][:2] == ("QUEUED", "w1"), execution_id
    assert marks.read_runs(["e10"])[0].owner is None, "a row held by another is not fenced"
    assert marks.read_runs(["e11"])[0].owner == "w1"
    assert view.counted == [("w1", 4, 4 * 9 * 5.0, 8)]
    # Lifting the fences as the firer does frees the keys for the copy sent again.
    assert marks.release_runs(back, RECALLED) == 8
    assert marks.read_runs(back) == marks.read_runs(["never-set"] * 8)
