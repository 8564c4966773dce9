"""A crowd of jobs of every kind fired over many passes on the in-memory fakes, the
books checked after each pass (tests/unit/fire_books.py)."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import PublishFailedError
from common.schedule import PAUSED_SKIP, MisfirePolicy, OverlapPolicy
from common.states import ExecutionStatus, JobStatus
from services.dispatcher.trigger.fire_rules import CANCELLED_SKIP, PAUSED_HOLD
from tests.unit.fire_books import landed
from tests.unit.fire_stage import NOOP, NOW, Stage

QUEUED = ExecutionStatus.QUEUED
SCHEDULED = ExecutionStatus.SCHEDULED
SKIPPED = ExecutionStatus.SKIPPED


@dataclass(frozen=True)
class Kind:
    """A kind of job in the crowd, and how its executions end up after every pass."""

    job: dict[str, object]
    runs: int
    ends: frozenset[ExecutionStatus]
    message: str | None = None


CRON = {"recurring": True, "next_trigger_time": NOW + 600_000, "status": JobStatus.WAITING}
KINDS = {
    "plain-noop": Kind({"handler": "demo.noop"}, 1, frozenset({QUEUED})),
    "plain-report": Kind({"handler": "report.build"}, 1, frozenset({QUEUED})),
    "plain-mail": Kind({"handler": "mail.send"}, 1, frozenset({QUEUED})),
    "orphan": Kind({"handler": "late.comer"}, 1, frozenset({QUEUED})),
    "paused": Kind({"status": JobStatus.PAUSED}, 1, frozenset({SCHEDULED}), PAUSED_HOLD),
    "paused-cron": Kind({**CRON, "status": JobStatus.PAUSED}, 2, frozenset({SKIPPED}), PAUSED_SKIP),
    "cancelled": Kind(
        {"status": JobStatus.CANCELLED}, 2, frozenset({ExecutionStatus.CANCELLED}), CANCELLED_SKIP
    ),
    "allow-cron": Kind({**CRON, "overlap_policy": OverlapPolicy.ALLOW}, 3, frozenset({QUEUED})),
    "forbid-cron": Kind(CRON, 3, frozenset({QUEUED, SKIPPED})),
}


def test_a_crowd_of_jobs_fired_over_many_passes_each_execution_ends_once() -> None:
    stage = Stage(fire_batch_size=40)
    stage.worker_up("w1", frozenset({"demo.noop", "report.build"}))
    stage.worker_up("w2", NOOP)
    stage.worker_up("w3", frozenset({"mail.send"}))
    kinds: dict[str, str] = {}
    for n in range(180):
        name = list(KINDS)[n % len(KINDS)]
        job = stage.job(**KINDS[name].job)
        for run in range(KINDS[name].runs):
            at = NOW - 500 + (n * 37 + run * 1_100) % 3_500
            kinds[stage.due(job, f"{name}-{n}-{run}", at=at)] = name
    late = stage.job(misfire_policy=MisfirePolicy.SKIP, misfire_threshold_seconds=1)
    stage.due(late, "late", at=NOW - 5_000)
    failures = 0
    for step in range(49):
        stage.clock.now = NOW + step * 250
        if stage.clock.now == NOW + 6_000:
            stage.worker_up("w4", frozenset({"late.comer"}))
        if step == 4:
            stage.publisher.fail_next_commit()
        try:
            stage.fire()
        except PublishFailedError:
            failures += 1  # what was due stays for the next pass, which the books follow
            continue
        assert stage.books() == [], f"after the pass at +{step * 250} ms"
    assert failures == 1
    rows = {r.execution_id: r for r in stage.store.executions.values()}
    for execution_id, name in kinds.items():
        row, kind = rows[execution_id], KINDS[name]
        assert row.status in kind.ends, (execution_id, row.status, row.message)
        if kind.message is not None:
            assert row.message == kind.message, execution_id
    forbid = [r for e, r in rows.items() if kinds.get(e) == "forbid-cron"]
    assert sum(r.status is QUEUED for r in forbid) == len(forbid) // 3, "one run per job"
    assert rows["late"].status is SKIPPED
    assert stage.store.jobs[late].status is JobStatus.FAILED
    spread = {w: len(landed(stage.broker, w)) for w in ("w1", "w2", "w3", "w4")}
    assert all(spread.values()), spread
