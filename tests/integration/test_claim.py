"""Claiming due triggers by version compare-and-set on real MySQL."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.db.due_jobs import ClaimUpdate, DueJob, claim_jobs, find_due_jobs
from common.db.jobs import JobPolicies, NewJob, get_job, insert_job
from common.loadbalance import WorkerChooser
from common.schedule import MisfirePolicy, OverlapPolicy
from common.states import JobStatus
from services.dispatcher.trigger import claim as claim_module
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.books import Expectation, assert_books
from tests.integration.helpers import make_app

RUN = ClaimUpdate(None, JobStatus.RUNNING)


def add_job(
    engine: Engine,
    trigger: int,
    handler: str = "demo.noop",
    cron: str | None = None,
    policies: JobPolicies | None = None,
) -> int:
    job = NewJob(1, "j", handler, {}, cron, trigger, None, None, None, policies or JobPolicies())
    with engine.begin() as conn:
        return insert_job(conn, job, 0)


def executions_of(engine: Engine, job_id: int) -> list[tuple[int, str, str | None]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT trigger_time, status, message FROM executions WHERE job_id = :j "
                "ORDER BY trigger_time"
            ),
            {"j": job_id},
        ).all()
    return [(int(r[0]), str(r[1]), r[2]) for r in rows]


def test_due_scan_returns_due_jobs_soonest_first_for_known_handlers(engine: Engine) -> None:
    make_app(engine)
    later = add_job(engine, 200)
    earlier = add_job(engine, 100)
    add_job(engine, 100, handler="other.handler")
    add_job(engine, 10_000)
    with engine.connect() as conn:
        due = find_due_jobs(conn, 500, {"demo.noop"}, 10)
    assert [j.id for j in due] == [earlier, later]


def test_two_claimers_of_the_same_batch_split_it_without_overlap(engine: Engine) -> None:
    make_app(engine)
    ids = [add_job(engine, 100 + i) for i in range(200)]
    with engine.connect() as conn:
        due = find_due_jobs(conn, 1_000, {"demo.noop"}, 500)
    won: list[set[int]] = []
    barrier = threading.Barrier(2)

    def claim() -> None:
        with engine.begin() as conn:
            barrier.wait()
            won.append(claim_jobs(conn, due, {j.id: RUN for j in due}, 1_000))

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert won[0].isdisjoint(won[1])
    assert won[0] | won[1] == set(ids)


def test_a_stale_version_claims_nothing(engine: Engine) -> None:
    make_app(engine)
    job_id = add_job(engine, 100)
    with engine.connect() as conn:
        stale = find_due_jobs(conn, 1_000, {"demo.noop"}, 10)
    with engine.begin() as conn:
        assert claim_jobs(conn, stale, {job_id: RUN}, 1_000) == {job_id}
    with engine.begin() as conn:
        assert claim_jobs(conn, stale, {job_id: RUN}, 1_000) == set()
        row = get_job(conn, 1, job_id)
    assert row is not None
    assert row.status == JobStatus.RUNNING
    assert row.version == 1


def test_a_partly_stale_batch_claims_only_the_jobs_still_at_their_version(
    engine: Engine,
) -> None:
    make_app(engine)
    taken, free = add_job(engine, 100), add_job(engine, 101)
    with engine.connect() as conn:
        stale = find_due_jobs(conn, 1_000, {"demo.noop"}, 10)
    with engine.begin() as conn:
        assert claim_jobs(conn, [j for j in stale if j.id == taken], {taken: RUN}, 1_000) == {taken}
    with engine.begin() as conn:
        assert claim_jobs(conn, stale, {j.id: RUN for j in stale}, 1_000) == {free}


def test_jobs_moving_to_different_next_triggers_each_get_their_own(engine: Engine) -> None:
    make_app(engine)
    first, second = add_job(engine, 100), add_job(engine, 200)
    with engine.connect() as conn:
        due = find_due_jobs(conn, 1_000, {"demo.noop"}, 10)
    updates = {
        first: ClaimUpdate(5_000, JobStatus.WAITING),
        second: ClaimUpdate(7_000, JobStatus.WAITING),
    }
    with engine.begin() as conn:
        assert claim_jobs(conn, due, updates, 1_000) == {first, second}
        jobs = {j: get_job(conn, 1, j) for j in (first, second)}
    assert {j: row.next_trigger_time for j, row in jobs.items() if row} == {
        first: 5_000,
        second: 7_000,
    }


def claimer(engine: Engine, client: redis.Redis, window_ms: int = 1_000) -> TriggerClaimer:
    return TriggerClaimer(
        engine, ClusterClock(client), 500, window_ms, ClaimSender(WorkerChooser())
    )


def claimed_two_second_cron(
    engine: Engine, redis_client: redis.Redis, also_one_shot: bool = False
) -> tuple[int, int, int | None]:
    """A '*/2 * * * * *' job (and a one-shot due with it) whose next trigger was claimed;
    returns that trigger's time, the cron job's id and the one-shot's."""
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    start = (now // 2000 + 1) * 2000
    job_id = add_job(engine, start, cron="*/2 * * * * *")
    one_shot = add_job(engine, start) if also_one_shot else None
    claimer(engine, redis_client, window_ms=2_500).claim({"demo.noop"})
    return start, job_id, one_shot


def test_claiming_a_cron_trigger_schedules_it_and_moves_the_job_on(
    engine: Engine, redis_client: redis.Redis
) -> None:
    start, job_id, _ = claimed_two_second_cron(engine, redis_client)
    with engine.connect() as conn:
        job = get_job(conn, 1, job_id)
    assert job is not None
    assert job.status == JobStatus.WAITING
    assert job.next_trigger_time == start + 2000
    assert executions_of(engine, job_id) == [(start, "SCHEDULED", None)]


def test_queue_overlap_holds_the_job_until_the_run_ends(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    policies = JobPolicies(overlap_policy=OverlapPolicy.QUEUE)
    job_id = add_job(engine, now - 10, cron="* * * * * *", policies=policies)
    claimer(engine, redis_client).claim({"demo.noop"})
    claimer(engine, redis_client).claim({"demo.noop"})
    with engine.connect() as conn:
        job = get_job(conn, 1, job_id)
    assert job is not None
    assert job.status == JobStatus.RUNNING
    assert len(executions_of(engine, job_id)) == 1


def test_misfire_skip_records_a_skipped_trigger_and_jumps_ahead(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    policies = JobPolicies(misfire_policy=MisfirePolicy.SKIP, misfire_threshold_seconds=5)
    missed = (now // 60_000 - 10) * 60_000
    job_id = add_job(engine, missed, cron="* * * * *", policies=policies)
    claimer(engine, redis_client).claim({"demo.noop"})
    [(trigger, status, message)] = executions_of(engine, job_id)
    assert (trigger, status) == (missed, "SKIPPED")
    assert message is not None and "misfire policy SKIP" in message
    with engine.connect() as conn:
        job = get_job(conn, 1, job_id)
    assert job is not None and job.next_trigger_time is not None
    assert job.next_trigger_time > now
    assert_books(engine, Expectation([job_id], {"WAITING"}, {"SKIPPED"}), timeout=0)


def test_misfire_fire_all_runs_each_missed_trigger_in_the_window(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    policies = JobPolicies(
        misfire_policy=MisfirePolicy.FIRE_ALL,
        misfire_threshold_seconds=5,
        overlap_policy=OverlapPolicy.ALLOW,
    )
    first = (now // 60_000 - 3) * 60_000
    job_id = add_job(engine, first, cron="* * * * *", policies=policies)
    for _ in range(5):
        claimer(engine, redis_client, window_ms=0).claim({"demo.noop"})
    runs = executions_of(engine, job_id)
    assert [t for t, _, _ in runs] == [first, first + 60_000, first + 120_000, first + 180_000]
    assert {s for _, s, _ in runs} == {"SCHEDULED"}


def test_one_shot_misfire_skip_fails_the_job_without_running_it(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    policies = JobPolicies(misfire_policy=MisfirePolicy.SKIP, misfire_threshold_seconds=1)
    job_id = add_job(engine, now - 60_000, policies=policies)
    claimer(engine, redis_client).claim({"demo.noop"})
    with engine.connect() as conn:
        job = get_job(conn, 1, job_id)
    assert job is not None
    assert job.status == JobStatus.FAILED
    assert executions_of(engine, job_id)[0][1] == "SKIPPED"
    assert_books(engine, Expectation([job_id], {"FAILED"}, {"SKIPPED"}), timeout=0)


def test_a_trigger_that_already_has_its_execution_is_not_created_again(
    engine: Engine, redis_client: redis.Redis
) -> None:
    """A job whose schedule was changed back onto a trigger already claimed."""
    start, job_id, other = claimed_two_second_cron(engine, redis_client, also_one_shot=True)
    assert other is not None
    with engine.begin() as conn:  # as an update recomputing the next trigger would
        conn.execute(
            sa.text("UPDATE jobs SET next_trigger_time = :t WHERE id = :j"),
            {"t": start, "j": job_id},
        )
    late = add_job(engine, start)
    claimer(engine, redis_client, window_ms=2_500).claim({"demo.noop"})
    assert executions_of(engine, job_id) == [(start, "SCHEDULED", None)]
    assert executions_of(engine, other) == [(start, "SCHEDULED", None)]
    # The rest of the batch was claimed, and the job moved on past the trigger.
    assert executions_of(engine, late) == [(start, "SCHEDULED", None)]
    with engine.connect() as conn:
        job = get_job(conn, 1, job_id)
    assert job is not None and job.next_trigger_time == start + 2000


def test_a_job_whose_schedule_cannot_be_computed_ends_alone_and_the_batch_goes_on(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    broken = add_job(engine, now - 10, cron="* * * * * *")
    with engine.begin() as conn:
        # A zone no computation can read (the API refuses one; a row can still hold it).
        conn.execute(
            sa.text("UPDATE jobs SET timezone = 'Nowhere/Atlantis' WHERE id = :j"), {"j": broken}
        )
    fine = [add_job(engine, now - 10) for _ in range(3)]
    claimer(engine, redis_client).claim({"demo.noop"})
    [(_, status, message)] = executions_of(engine, broken)
    assert status == "FAILED"
    assert message is not None and "cannot compute this job's schedule" in message
    with engine.connect() as conn:
        job = get_job(conn, 1, broken)
    assert job is not None and job.status == JobStatus.FAILED
    assert all(len(executions_of(engine, j)) == 1 for j in fine)
    assert_books(engine, Expectation([broken], {"FAILED"}, {"FAILED"}), timeout=0)


def test_a_job_ended_at_its_claim_calls_back_with_why(
    engine: Engine, redis_client: redis.Redis
) -> None:
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    broken = add_job(engine, now - 10, cron="* * * * * *")
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE jobs SET cron_expr = 'R * * * *', "
                "callback_url = 'https://example.com/hook' WHERE id = :j"
            ),
            {"j": broken},
        )
    claimer(engine, redis_client).claim({"demo.noop"})
    [(_, status, message)] = executions_of(engine, broken)
    with engine.connect() as conn:
        [delivery] = conn.execute(
            sa.text("SELECT url, payload, status FROM callback_deliveries WHERE job_id = :j"),
            {"j": broken},
        ).all()
    # Recorded PENDING in the claim's transaction: the sweep that republishes deliveries
    # never confirmed in the callbacks queue hands it to the notifier.
    assert (delivery.url, delivery.status) == ("https://example.com/hook", "PENDING")
    payload = json.loads(delivery.payload)["data"]
    assert (payload["jobId"], payload["status"], payload["message"]) == (broken, status, message)
    assert payload["attempt"] == 1


def test_a_backlog_of_catch_up_triggers_never_holds_back_the_others(
    engine: Engine, redis_client: redis.Redis
) -> None:
    """More jobs catching up (FIRE_ALL, every second, far behind) than one claim takes:
    due again after every claim and always the oldest, they took every claim."""
    make_app(engine)
    now = ClusterClock(redis_client).now_ms()
    catch_up = JobPolicies(misfire_policy=MisfirePolicy.FIRE_ALL, catch_up_window_seconds=7_200)
    behind = [
        add_job(engine, now - 3_600_000, cron="* * * * * *", policies=catch_up) for _ in range(3)
    ]
    on_time = add_job(engine, now)
    late = add_job(engine, now - 30_000)  # after an outage, say
    small = TriggerClaimer(
        engine, ClusterClock(redis_client), 3, 1_000, ClaimSender(WorkerChooser())
    )
    small.claim({"demo.noop"})
    claimed = {j for j in [*behind, on_time, late] if executions_of(engine, j)}
    # The on-time trigger first, then the late ones, least late first.
    assert {on_time, late} < claimed and len(claimed & set(behind)) == 1


def test_an_empty_backlog_is_looked_at_again_only_after_a_while(
    engine: Engine, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs due long ago whose handler no live worker runs stay in the backlog's range:
    every look walks past them, so a look that found nothing waits before the next."""
    make_app(engine)
    clock = ClusterClock(redis_client)
    now = [clock.now_ms()]
    monkeypatch.setattr(clock, "now_ms", lambda: now[0])
    add_job(engine, now[0] - 3_600_000, handler="gone.handler")
    looks: list[bool] = []

    def counting(*args: Any, **kwargs: Any) -> list[DueJob]:
        looks.append(bool(kwargs.get("latest_first")))
        return find_due_jobs(*args, **kwargs)

    monkeypatch.setattr(claim_module, "find_due_jobs", counting)
    claiming = TriggerClaimer(engine, clock, 10, 1_000, ClaimSender(WorkerChooser()))
    claiming.claim({"demo.noop"})
    claiming.claim({"demo.noop"})
    assert looks.count(True) == 1
    late = add_job(engine, now[0] - 60_000)
    now[0] += claim_module.BACKLOG_IDLE_MS
    claiming.claim({"demo.noop"})
    assert looks.count(True) == 2 and executions_of(engine, late)


def test_a_manual_run_on_a_triggers_millisecond_leaves_the_trigger_its_own_run(
    engine: Engine, redis_client: redis.Redis
) -> None:
    """A manual run taken while a cron job was paused, on what its resumed schedule
    made its next trigger: both run."""
    start, job_id, _ = claimed_two_second_cron(engine, redis_client)
    following = start + 2000
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO executions (execution_id, job_id, attempt, trigger_time, "
                "scheduled_at, status, manual, created_at) "
                "VALUES ('manual-1', :j, 1, :t, :t, 'SUCCEEDED', 1, :t)"
            ),
            {"j": job_id, "t": following},
        )
    claimer(engine, redis_client, window_ms=4_500).claim({"demo.noop"})
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT manual, status FROM executions WHERE job_id = :j AND trigger_time = :t "
                "ORDER BY manual"
            ),
            {"j": job_id, "t": following},
        ).all()
    assert [(bool(r[0]), str(r[1])) for r in rows] == [(False, "SCHEDULED"), (True, "SUCCEEDED")]
    # The unique key is what keeps that trigger to one scheduled run of each attempt.
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO executions (execution_id, job_id, attempt, trigger_time, "
                "scheduled_at, status, manual, created_at) "
                "VALUES ('second-1', :j, 1, :t, :t, 'SCHEDULED', 0, :t)"
            ),
            {"j": job_id, "t": following},
        )
