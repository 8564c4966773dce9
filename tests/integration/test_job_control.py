"""Job control through the OpenAPI on real MySQL and Redis: pause, resume, trigger,
cancel, update, delete and list, allowed and refused, with the dispatcher's own claim
and result recording where a transition meets them."""

from __future__ import annotations

import base64
import threading
import uuid
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.apps import AppCredentials
from common.db.control import JobFilter, list_query
from common.db.executions import NewExecution, insert_executions
from common.db.jobs import NewJob, find_due_jobs, insert_job
from common.errors import InvalidTransitionError
from common.keys import RedisKeys
from common.loadbalance import WorkerChooser
from common.messages import ExecutionResult
from common.schedule import PAUSE_SKIP_ROWS, PAUSED_SKIP
from common.states import ExecutionStatus, JobStatus
from services.api import control
from services.api.state import ApiState
from services.dispatcher.outcomes.record import record_results
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.integration.helpers import DEMO_HANDLERS, make_app

FUTURE = 4_102_444_800_000  # 2100-01-01
FINAL = ["SUCCEEDED", "FAILED", "CANCELLED"]


def api_state(client: TestClient) -> ApiState:
    state: ApiState = client.app.state.kairos  # type: ignore[attr-defined]
    return state


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"jobName": "report", "jobHandler": "demo.echo", "params": {"a": 1}}
    base.update(overrides)
    return base


def create(client: TestClient, **overrides: Any) -> int:
    response = client.post("/openapi/jobs", json=body(**overrides))
    assert response.status_code == 202, response.text
    job_id: int = response.json()["jobId"]
    return job_id


def job_row(engine: Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(sa.text("SELECT * FROM jobs WHERE id = :j"), {"j": job_id}).one()
    return dict(row._mapping)


def set_status(engine: Engine, job_id: int, status: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET status = :s WHERE id = :j"), {"s": status, "j": job_id}
        )


def executions_of(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT * FROM executions WHERE job_id = :j ORDER BY id"), {"j": job_id}
        ).all()
    return [dict(r._mapping) for r in rows]


def add_execution(
    engine: Engine, job_id: int, status: ExecutionStatus, trigger_time: int, manual: bool = False
) -> str:
    execution_id = str(uuid.uuid4())
    with engine.begin() as conn:
        insert_executions(
            conn, [NewExecution(execution_id, job_id, 1, trigger_time, 0, manual=manual)], 0
        )
        conn.execute(
            sa.text("UPDATE executions SET status = :s, worker_id = 'w1' WHERE execution_id = :e"),
            {"s": str(status), "e": execution_id},
        )
    return execution_id


def claim_due(engine: Engine, redis_client: redis.Redis) -> None:
    clock = ClusterClock(redis_client)
    TriggerClaimer(engine, clock, 100, 1_000, ClaimSender(WorkerChooser())).claim(DEMO_HANDLERS)


def record(
    engine: Engine, redis_client: redis.Redis, job_id: int, execution_id: str, status: str
) -> None:
    result = ExecutionResult(
        execution_id=execution_id,
        job_id=job_id,
        worker_id="w1",
        status=status,  # type: ignore[arg-type]
        started_at=1,
        ended_at=2,
    )
    record_results(engine, ClusterClock(redis_client), [result])


def assert_refused(response: Any, job_id: int, status: str, allowed: str, done: str) -> None:
    assert response.status_code == 409, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["title"] == "Invalid transition"
    assert problem["detail"] == f"job {job_id} is {status}; only a {allowed} job can be {done}"


def wake_length(redis_client: redis.Redis, namespace: StoreSettings) -> int:
    return int(redis_client.llen(RedisKeys(namespace.namespace).wake))


# pause


@pytest.mark.parametrize("status", ["WAITING", "RUNNING"])
def test_pause_moves_a_live_job_to_paused(client: TestClient, engine: Engine, status: str) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/pause")
    assert response.status_code == 200
    assert response.json()["status"] == "PAUSED"
    after = job_row(engine, job_id)
    assert after["status"] == "PAUSED"
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] >= before["updated_at"]


def test_a_paused_job_is_not_claimed(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    claim_due(engine, redis_client)
    with engine.connect() as conn:
        assert find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10) == []
    assert executions_of(engine, job_id) == []
    assert job_row(engine, job_id)["status"] == "PAUSED"


def test_pause_lets_a_claimed_run_go_on(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    claim_due(engine, redis_client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    [execution] = executions_of(engine, job_id)
    assert execution["status"] == "SCHEDULED"
    record(engine, redis_client, job_id, execution["execution_id"], "SUCCEEDED")
    assert job_row(engine, job_id)["status"] == "SUCCEEDED"


def test_pause_again_changes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/pause")
    before = job_row(engine, job_id)
    again = client.post(f"/openapi/jobs/{job_id}/pause")
    assert again.status_code == 200
    assert again.json()["status"] == "PAUSED"
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", FINAL)
def test_pause_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/pause")
    assert_refused(response, job_id, status, "WAITING or RUNNING", "paused")
    assert job_row(engine, job_id) == before


# resume


def test_resume_waits_again_with_the_trigger_time_kept(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=1_000)
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.status_code == 200
    assert response.json()["status"] == "WAITING"
    assert response.json()["nextTriggerTime"] == "1970-01-01T00:00:01.000Z"
    row = job_row(engine, job_id)
    assert (row["status"], row["next_trigger_time"]) == ("WAITING", 1_000)
    with engine.connect() as conn:
        assert [j.id for j in find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10)] == [job_id]


def paused_cron(client: TestClient, engine: Engine, missed_ms: int, **fields: Any) -> int:
    """A recurring job paused with its next trigger ``missed_ms`` before now."""
    job_id = create(client, **fields)
    client.post(f"/openapi/jobs/{job_id}/pause")
    now = api_state(client).clock.now_ms()
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE jobs SET next_trigger_time = :t WHERE id = :j"),
            {"t": (now - missed_ms) // 1000 * 1000, "j": job_id},
        )
    return job_id


def test_resume_of_a_cron_job_skips_the_triggers_inside_the_pause(
    client: TestClient, engine: Engine
) -> None:
    # Paused for less than the misfire threshold: no trigger of the pause may run.
    job_id = paused_cron(client, engine, 5_000, cronExpr="* * * * * *")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    now = api_state(client).clock.now_ms()
    assert response.status_code == 200
    skipped = executions_of(engine, job_id)
    assert 5 <= len(skipped) <= 6
    assert {(e["status"], e["message"]) for e in skipped} == {("SKIPPED", PAUSED_SKIP)}
    row = job_row(engine, job_id)
    assert row["status"] == "WAITING"
    assert row["next_trigger_time"] >= now - 1_000
    assert all(e["trigger_time"] < row["next_trigger_time"] for e in skipped)


def test_a_long_pause_records_its_first_missed_triggers_and_says_there_were_more(
    client: TestClient, engine: Engine
) -> None:
    job_id = paused_cron(client, engine, 3_600_000, fixedRateSeconds=1)
    client.post(f"/openapi/jobs/{job_id}/resume")
    skipped = executions_of(engine, job_id)
    assert len(skipped) == PAUSE_SKIP_ROWS
    last = max(skipped, key=lambda e: e["trigger_time"])
    assert "the later triggers until the resume" in last["message"]


def test_resume_of_a_one_shot_job_whose_run_is_pending_is_running(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client)
    claim_due(engine, redis_client)
    assert job_row(engine, job_id)["status"] == "RUNNING"
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.json()["status"] == "RUNNING"
    [execution] = executions_of(engine, job_id)
    record(engine, redis_client, job_id, execution["execution_id"], "FAILED")
    assert job_row(engine, job_id)["status"] == "FAILED"


def test_resume_of_a_one_shot_job_with_only_a_manual_run_waits(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/trigger")
    client.post(f"/openapi/jobs/{job_id}/pause")
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert response.json()["status"] == "WAITING"
    assert job_row(engine, job_id)["status"] == "WAITING"


@pytest.mark.parametrize(("overlap", "expected"), [("QUEUE", "RUNNING"), ("FORBID", "WAITING")])
def test_resume_of_a_recurring_job_is_held_only_under_overlap_queue(
    client: TestClient, engine: Engine, redis_client: redis.Redis, overlap: str, expected: str
) -> None:
    job_id = create(client, fixedRateSeconds=3600, overlapPolicy=overlap)
    claim_due(engine, redis_client)
    [execution] = executions_of(engine, job_id)
    client.post(f"/openapi/jobs/{job_id}/pause")
    client.post(f"/openapi/jobs/{job_id}/resume")
    assert job_row(engine, job_id)["status"] == expected
    record(engine, redis_client, job_id, execution["execution_id"], "SUCCEEDED")
    assert job_row(engine, job_id)["status"] == "WAITING"


@pytest.mark.parametrize("status", ["WAITING", "RUNNING"])
def test_resume_of_a_live_job_changes_nothing(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    assert client.post(f"/openapi/jobs/{job_id}/resume").status_code == 200
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", FINAL)
def test_resume_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/resume")
    assert_refused(response, job_id, status, "PAUSED", "resumed")
    assert job_row(engine, job_id) == before


# trigger


def test_trigger_creates_a_scheduled_manual_execution_and_wakes_the_dispatcher(
    client: TestClient, engine: Engine, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    assert wake_length(redis_client, namespace) == 0
    before = job_row(engine, job_id)
    now = api_state(client).clock.now_ms()
    response = client.post(f"/openapi/jobs/{job_id}/trigger")
    assert response.status_code == 202
    answer = response.json()
    assert answer["jobId"] == job_id
    assert answer["status"] == "SCHEDULED"
    [execution] = executions_of(engine, job_id)
    assert execution["execution_id"] == answer["executionId"]
    assert (execution["status"], execution["attempt"], execution["manual"]) == (
        "SCHEDULED",
        1,
        1,
    )
    assert now <= execution["scheduled_at"] <= now + 5_000
    assert execution["trigger_time"] == execution["scheduled_at"]
    assert wake_length(redis_client, namespace) == 1
    assert job_row(engine, job_id) == before
    listed = client.get(f"/openapi/jobs/{job_id}/executions").json()["executions"]
    assert [e["executionId"] for e in listed] == [answer["executionId"]]


@pytest.mark.parametrize("status", ["WAITING", "RUNNING", "PAUSED", "SUCCEEDED", "FAILED"])
def test_trigger_is_allowed_for_every_job_not_cancelled(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    set_status(engine, job_id, status)
    assert client.post(f"/openapi/jobs/{job_id}/trigger").status_code == 202
    assert [e["status"] for e in executions_of(engine, job_id)] == ["SCHEDULED"]
    assert job_row(engine, job_id)["status"] == status


def test_trigger_is_refused_for_a_cancelled_job(client: TestClient, engine: Engine) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/cancel")
    response = client.post(f"/openapi/jobs/{job_id}/trigger")
    assert_refused(
        response,
        job_id,
        "CANCELLED",
        "WAITING, RUNNING, SUCCEEDED, FAILED or PAUSED",
        "triggered",
    )
    assert executions_of(engine, job_id) == []


def test_triggers_in_the_same_millisecond_get_the_next_free_trigger_time(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    monkeypatch.setattr(api_state(client).clock, "now_ms", lambda: 1_700_000_000_000)
    answers = [client.post(f"/openapi/jobs/{job_id}/trigger") for _ in range(3)]
    assert [a.status_code for a in answers] == [202, 202, 202]
    rows = executions_of(engine, job_id)
    assert [r["trigger_time"] - 1_700_000_000_000 for r in rows] == [0, 1, 2]
    assert {r["scheduled_at"] for r in rows} == {1_700_000_000_000}
    assert len({a.json()["executionId"] for a in answers}) == 3


def test_a_manual_run_leaves_a_finished_job_finished(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    set_status(engine, job_id, "SUCCEEDED")
    execution_id = client.post(f"/openapi/jobs/{job_id}/trigger").json()["executionId"]
    record(engine, redis_client, job_id, execution_id, "FAILED")
    assert job_row(engine, job_id)["status"] == "SUCCEEDED"
    last = client.get(f"/openapi/jobs/{job_id}").json()["lastExecution"]
    assert (last["executionId"], last["status"]) == (execution_id, "FAILED")


# cancel


@pytest.mark.parametrize("status", ["WAITING", "RUNNING", "PAUSED"])
def test_cancel_cancels_the_job_and_its_scheduled_executions_only(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    other_id = create(client, triggerAt=FUTURE)
    scheduled = add_execution(engine, job_id, ExecutionStatus.SCHEDULED, 1)
    queued = add_execution(engine, job_id, ExecutionStatus.QUEUED, 2)
    untouched = add_execution(engine, other_id, ExecutionStatus.SCHEDULED, 1)
    set_status(engine, job_id, status)
    response = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert response.status_code == 200
    assert response.json()["status"] == "CANCELLED"
    assert response.json()["nextTriggerTime"] is None
    by_id = {e["execution_id"]: e for e in executions_of(engine, job_id)}
    assert by_id[scheduled]["status"] == "CANCELLED"
    assert by_id[scheduled]["ended_at"] is not None
    assert by_id[queued]["status"] == "QUEUED"
    assert [e["status"] for e in executions_of(engine, other_id)] == ["SCHEDULED"]
    assert executions_of(engine, other_id)[0]["execution_id"] == untouched
    assert job_row(engine, job_id)["status"] == "CANCELLED"
    with engine.connect() as conn:
        assert [j.id for j in find_due_jobs(conn, FUTURE, DEMO_HANDLERS, 10)] == [other_id]


def test_a_run_going_at_cancel_is_recorded_and_the_job_stays_cancelled(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, maxRetries=3)
    claim_due(engine, redis_client)
    [execution] = executions_of(engine, job_id)
    with engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE executions SET status = 'QUEUED' WHERE id = :i"), {"i": execution["id"]}
        )
    client.post(f"/openapi/jobs/{job_id}/cancel")
    record(engine, redis_client, job_id, execution["execution_id"], "FAILED")
    assert [e["status"] for e in executions_of(engine, job_id)] == ["FAILED"]
    assert job_row(engine, job_id)["status"] == "CANCELLED"


def test_cancel_again_changes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client)
    client.post(f"/openapi/jobs/{job_id}/cancel")
    before = job_row(engine, job_id)
    again = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert again.status_code == 200
    assert again.json()["status"] == "CANCELLED"
    assert job_row(engine, job_id) == before


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED"])
def test_cancel_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    set_status(engine, job_id, status)
    scheduled = add_execution(engine, job_id, ExecutionStatus.SCHEDULED, 1, manual=True)
    before = job_row(engine, job_id)
    response = client.post(f"/openapi/jobs/{job_id}/cancel")
    assert_refused(response, job_id, status, "WAITING, RUNNING or PAUSED", "cancelled")
    assert job_row(engine, job_id) == before
    assert [(e["execution_id"], e["status"]) for e in executions_of(engine, job_id)] == [
        (scheduled, "SCHEDULED")
    ]


def test_triggers_racing_a_cancel_leave_no_scheduled_run_of_the_cancelled_job(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    state = api_state(client)
    app = state.app_for_key(app_credentials.api_key)
    assert app is not None
    accepted: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(5)
    first_accepted = threading.Event()

    def trigger_many() -> None:
        start.wait()
        for _ in range(15):
            try:
                accepted.append(control.trigger_job(state, app, job_id).execution_id)
                first_accepted.set()
            except InvalidTransitionError:
                return
            except BaseException as e:
                errors.append(e)
                return

    def cancel_soon() -> None:
        start.wait()
        if first_accepted.wait(30):
            control.cancel_job(state, app, job_id)

    threads = [threading.Thread(target=trigger_many) for _ in range(4)]
    threads.append(threading.Thread(target=cancel_soon))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert 0 < len(accepted) < 60
    rows = executions_of(engine, job_id)
    assert sorted(r["execution_id"] for r in rows) == sorted(accepted)
    assert {r["status"] for r in rows} == {"CANCELLED"}
    assert job_row(engine, job_id)["status"] == "CANCELLED"


# update


def test_update_of_the_cron_expression_recomputes_the_next_trigger(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    now = api_state(client).clock.now_ms()
    response = client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "0  12 * * *"})
    assert response.status_code == 200, response.text
    view = response.json()
    assert view["cronExpr"] == "0 12 * * *"
    assert view["nextTriggerTime"].endswith("T12:00:00.000Z")
    after = job_row(engine, job_id)
    assert now < after["next_trigger_time"] <= now + 86_400_000
    assert after["version"] == before["version"] + 1
    assert after["updated_at"] >= now


def test_update_of_the_time_zone_moves_the_next_trigger(client: TestClient) -> None:
    job_id = create(client, cronExpr="0 12 * * *")
    view = client.patch(f"/openapi/jobs/{job_id}", json={"timezone": "Asia/Tokyo"}).json()
    assert view["nextTriggerTime"].endswith("T03:00:00.000Z")
    assert view["policies"]["timezone"] == "Asia/Tokyo"


def test_update_of_the_fixed_rate_fires_next_one_period_after_now(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, triggerAt=FUTURE, fixedRateSeconds=3600)
    now = api_state(client).clock.now_ms()
    response = client.patch(f"/openapi/jobs/{job_id}", json={"fixedRateSeconds": 60})
    assert response.status_code == 200
    assert now + 60_000 <= job_row(engine, job_id)["next_trigger_time"] <= now + 65_000


def test_a_recurring_job_may_switch_from_cron_to_fixed_rate(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    response = client.patch(
        f"/openapi/jobs/{job_id}", json={"cronExpr": None, "fixedRateSeconds": 120}
    )
    assert response.status_code == 200, response.text
    row = job_row(engine, job_id)
    assert (row["cron_expr"], row["fixed_rate_seconds"]) == (None, 120)


def test_update_without_a_schedule_change_keeps_the_next_trigger(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(
        client,
        cronExpr="0 0 1 1 *",
        callbackUrl="https://example.com/hook",
        timeoutSeconds=30,
    )
    before = job_row(engine, job_id)
    patch = {
        "jobName": "renamed",
        "params": {"b": [1, 2]},
        "maxRetries": 2,
        "overlapPolicy": "QUEUE",
        "callbackUrl": None,
        "timeoutSeconds": None,
    }
    view = client.patch(f"/openapi/jobs/{job_id}", json=patch).json()
    assert (view["jobName"], view["params"], view["callbackUrl"]) == (
        "renamed",
        {"b": [1, 2]},
        None,
    )
    assert view["policies"]["maxRetries"] == 2
    assert view["policies"]["overlapPolicy"] == "QUEUE"
    assert view["policies"]["timeoutSeconds"] is None
    after = job_row(engine, job_id)
    assert after["next_trigger_time"] == before["next_trigger_time"]
    assert after["client_request_id"] == before["client_request_id"]
    assert after["request_hash"] == before["request_hash"]


def test_a_patch_that_changes_nothing_writes_nothing(client: TestClient, engine: Engine) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    for patch in ({}, {"jobName": "report", "cronExpr": "0 0 1 1 *", "timezone": "UTC"}):
        assert client.patch(f"/openapi/jobs/{job_id}", json=patch).status_code == 200
    assert job_row(engine, job_id) == before


def test_update_keeps_a_handler_no_worker_registers_now(
    client: TestClient, engine: Engine, app_credentials: AppCredentials
) -> None:
    with engine.begin() as conn:
        app_pk = conn.execute(
            sa.text("SELECT id FROM apps WHERE app_id = :a"), {"a": app_credentials.app_id}
        ).scalar_one()
        job = NewJob(app_pk, "old", "retired.handler", {}, None, FUTURE, None, None, None)
        job_id = insert_job(conn, job, 0)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "still here"})
    assert response.status_code == 200, response.text
    assert response.json()["jobHandler"] == "retired.handler"


CRON = {"cronExpr": "0 0 1 1 *"}
ONE_SHOT = {"triggerAt": FUTURE}


@pytest.mark.parametrize(
    ("created", "patch", "field"),
    [
        (CRON, {"cronExpr": "*/5 * *"}, "cronExpr"),
        (CRON, {"cronExpr": "99 * * * *"}, "cronExpr"),
        (CRON, {"timezone": "Mars/Olympus_Mons"}, "timezone"),
        (CRON, {"params": {"blob": "x" * (64 * 1024)}}, "params"),
        (CRON, {"callbackUrl": "ftp://example.com/hook"}, "callbackUrl"),
        (CRON, {"jobName": None}, "jobName"),
        (CRON, {"jobName": ""}, "jobName"),
        (CRON, {"maxRetries": -1}, "maxRetries"),
        (CRON, {"misfirePolicy": "SOMETIMES"}, "misfirePolicy"),
        (CRON, {"jobHandler": "demo.fail"}, "jobHandler"),
        (CRON, {"fixedRateSeconds": 60}, "fixedRateSeconds"),
        (CRON, {"cronExpr": None}, "cronExpr"),
        ({"fixedRateSeconds": 60}, {"fixedRateSeconds": None}, "fixedRateSeconds"),
        (ONE_SHOT, {"cronExpr": "0 * * * *"}, "cronExpr"),
        (ONE_SHOT, {"fixedRateSeconds": 60}, "fixedRateSeconds"),
    ],
)
def test_bad_update_is_a_clear_422_and_writes_nothing(
    client: TestClient,
    engine: Engine,
    created: dict[str, Any],
    patch: dict[str, Any],
    field: str,
) -> None:
    job_id = create(client, **created)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json=patch)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert field in problem["detail"]
    assert field in str(problem["errors"])
    assert job_row(engine, job_id) == before


def test_a_one_shot_job_refuses_a_schedule_with_a_message(client: TestClient) -> None:
    job_id = create(client, triggerAt=FUTURE)
    problem = client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "0 * * * *"}).json()
    assert problem["errors"] == [
        {
            "field": "cronExpr",
            "message": "a one-shot job cannot be given a schedule; submit a new job with it",
        }
    ]


@pytest.mark.parametrize("status", FINAL)
def test_update_is_refused_for_a_finished_job(
    client: TestClient, engine: Engine, status: str
) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    before = job_row(engine, job_id)
    response = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "late"})
    assert_refused(response, job_id, status, "WAITING, RUNNING or PAUSED", "updated")
    assert job_row(engine, job_id) == before


# delete


def test_delete_hides_the_job_and_cancels_its_scheduled_runs(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{job_id}/trigger")
    response = client.delete(f"/openapi/jobs/{job_id}")
    assert response.status_code == 204
    assert response.content == b""
    row = job_row(engine, job_id)
    assert row["status"] == "CANCELLED"
    assert row["deleted_at"] is not None
    assert [e["status"] for e in executions_of(engine, job_id)] == ["CANCELLED"]
    assert client.get(f"/openapi/jobs/{job_id}").status_code == 404
    assert client.get(f"/openapi/jobs/{job_id}/executions").status_code == 404
    assert client.get("/openapi/jobs").json()["jobs"] == []
    claim_due(engine, redis_client)
    assert [e["status"] for e in executions_of(engine, job_id)] == ["CANCELLED"]


def test_a_deleted_job_answers_404_to_everything(client: TestClient) -> None:
    job_id = create(client)
    client.delete(f"/openapi/jobs/{job_id}")
    assert client.delete(f"/openapi/jobs/{job_id}").status_code == 404
    for action in ("pause", "resume", "trigger", "cancel"):
        response = client.post(f"/openapi/jobs/{job_id}/{action}")
        assert response.status_code == 404
        assert response.json()["detail"] == f"job {job_id} does not exist"
    assert client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "x"}).status_code == 404


@pytest.mark.parametrize("status", ["SUCCEEDED", "FAILED", "PAUSED"])
def test_delete_is_allowed_from_any_status(client: TestClient, engine: Engine, status: str) -> None:
    job_id = create(client)
    set_status(engine, job_id, status)
    assert client.delete(f"/openapi/jobs/{job_id}").status_code == 204
    assert job_row(engine, job_id)["status"] == "CANCELLED"


# list


def test_list_pages_newest_first_with_a_cursor(client: TestClient) -> None:
    created = [create(client, jobName=f"job {i}", triggerAt=FUTURE) for i in range(7)]
    pages: list[list[int]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        answer = client.get("/openapi/jobs", params=params).json()
        pages.append([job["jobId"] for job in answer["jobs"]])
        cursor = answer["nextCursor"]
        if cursor is None:
            break
        assert len(pages) < 5
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [j for page in pages for j in page] == sorted(created, reverse=True)


def test_a_last_full_page_has_no_next_cursor(client: TestClient) -> None:
    for _ in range(6):
        create(client, triggerAt=FUTURE)
    first = client.get("/openapi/jobs", params={"limit": 3}).json()
    second = client.get("/openapi/jobs", params={"limit": 3, "cursor": first["nextCursor"]})
    assert len(second.json()["jobs"]) == 3
    assert second.json()["nextCursor"] is None


def test_list_filters_by_status_handler_and_name_prefix(client: TestClient, engine: Engine) -> None:
    names = ["a%b", "axb", "a_c", "abc", "b%"]
    ids = {name: create(client, jobName=name, triggerAt=FUTURE) for name in names}
    failing = create(client, jobName="zz", jobHandler="demo.fail", triggerAt=FUTURE)
    client.post(f"/openapi/jobs/{ids['abc']}/pause")

    def listed(**params: Any) -> list[int]:
        response = client.get("/openapi/jobs", params=params)
        assert response.status_code == 200, response.text
        return [job["jobId"] for job in response.json()["jobs"]]

    assert listed(namePrefix="a%") == [ids["a%b"]]
    assert listed(namePrefix="a_") == [ids["a_c"]]
    assert listed(namePrefix="a") == sorted([ids[n] for n in names[:4]], reverse=True)
    assert listed(status="PAUSED") == [ids["abc"]]
    assert listed(handler="demo.fail") == [failing]
    assert listed(handler="demo.fail", status="PAUSED") == []
    assert listed(status="WAITING", namePrefix="a", limit=1) == [ids["a_c"]]


def test_list_items_carry_the_last_execution_and_the_shown_status(
    client: TestClient, engine: Engine
) -> None:
    busy = create(client, fixedRateSeconds=60, triggerAt=FUTURE)
    idle = create(client, triggerAt=FUTURE)
    add_execution(engine, busy, ExecutionStatus.SUCCEEDED, 1)
    newest = add_execution(engine, busy, ExecutionStatus.QUEUED, 2)
    jobs = {job["jobId"]: job for job in client.get("/openapi/jobs").json()["jobs"]}
    assert jobs[busy]["lastExecution"]["executionId"] == newest
    assert jobs[busy]["status"] == "RUNNING"
    assert jobs[idle]["lastExecution"] is None
    assert jobs[idle]["status"] == "WAITING"
    assert jobs[busy] == client.get(f"/openapi/jobs/{busy}").json()


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"cursor": "!!!"}, "cursor"),
        ({"cursor": b64("abc")}, "cursor"),
        ({"cursor": b64("0")}, "cursor"),
        ({"cursor": b64("-5")}, "cursor"),
        ({"cursor": b64("12")}, "cursor"),  # padded: not what the API hands out
        ({"cursor": "x" * 65}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": 201}, "limit"),
        ({"status": "DONE"}, "status"),
    ],
)
def test_list_refuses_a_bad_query(client: TestClient, params: dict[str, Any], field: str) -> None:
    response = client.get("/openapi/jobs", params=params)
    assert response.status_code == 422
    assert field in response.json()["detail"]


def test_list_scans_the_app_id_index(engine: Engine) -> None:
    query = list_query(1, JobFilter(JobStatus.WAITING, "demo.echo", "a"), 100, 51)
    compiled = query.compile(dialect=engine.dialect)
    with engine.connect() as conn:
        plan = conn.exec_driver_sql("EXPLAIN " + str(compiled), compiled.params).mappings().all()
    assert [row["key"] for row in plan] == ["ix_jobs_app_id_id"]


# apps, keys, documentation


def test_another_app_can_neither_see_nor_change_a_job(client: TestClient, engine: Engine) -> None:
    job_id = create(client, cronExpr="0 0 1 1 *")
    before = job_row(engine, job_id)
    other = {"Authorization": f"Bearer {make_app(engine, 'other').api_key}"}
    for action in ("pause", "resume", "trigger", "cancel"):
        assert client.post(f"/openapi/jobs/{job_id}/{action}", headers=other).status_code == 404
    patched = client.patch(f"/openapi/jobs/{job_id}", json={"jobName": "x"}, headers=other)
    assert patched.status_code == 404
    assert client.delete(f"/openapi/jobs/{job_id}", headers=other).status_code == 404
    assert client.get("/openapi/jobs", headers=other).json() == {"jobs": [], "nextCursor": None}
    assert [j["jobId"] for j in client.get("/openapi/jobs").json()["jobs"]] == [job_id]
    assert job_row(engine, job_id) == before
    assert executions_of(engine, job_id) == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/openapi/jobs"),
        ("POST", "/openapi/jobs/1/pause"),
        ("POST", "/openapi/jobs/1/resume"),
        ("POST", "/openapi/jobs/1/trigger"),
        ("POST", "/openapi/jobs/1/cancel"),
        ("PATCH", "/openapi/jobs/1"),
        ("DELETE", "/openapi/jobs/1"),
    ],
)
def test_control_needs_the_api_key(client: TestClient, method: str, path: str) -> None:
    kwargs: dict[str, Any] = {"json": {}} if method == "PATCH" else {}
    response = client.request(method, path, headers={"Authorization": "Bearer nope"}, **kwargs)
    assert response.status_code == 401


def test_openapi_document_names_the_control_operations(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    operations = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    expected = {"listJobs", "pauseJob", "resumeJob", "triggerJob", "cancelJob", "updateJob"}
    assert expected | {"deleteJob", "getJob", "createJob"} <= operations
