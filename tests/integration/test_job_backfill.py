"""Backfilling a recurring job through the OpenAPI on real MySQL and Redis: the runs
of its past trigger times that have none, each created once however often (or however
concurrently) it is asked for, marked backfill, and nothing written when refused."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError

from common.config import ApiSettings, StoreSettings
from common.db.apps import MySqlAppStore
from common.db.backfill import backfill_execution
from common.db.executions import NewExecution, insert_executions, insert_missing_executions
from common.db.records import JobRecord
from common.db.schema import jobs
from common.execution_ids import trigger_execution_id
from common.keys import RedisKeys
from common.timefmt import iso_ms
from services.api.app import create_app
from services.api.backfill import backfill_job
from services.api.schemas import BackfillAccepted, BackfillRequest
from tests.integration.control_helpers import (
    FUTURE,
    api_state,
    assert_refused,
    create,
    executions_of,
    job_row,
    record,
    wake_length,
)
from tests.integration.helpers import make_app, public_names

MINUTE = 60_000
EVERY_MINUTE = {"cronExpr": "* * * * *"}


def minute_floor(client: TestClient) -> int:
    """The start of the current minute by the API's clock."""
    now = api_state(client).clock.now_ms()
    return now - now % MINUTE


def backfill(client: TestClient, job_id: int, from_ms: Any, to_ms: Any) -> dict[str, Any]:
    """A backfill that must be accepted; its answer."""
    response = client.post(f"/openapi/jobs/{job_id}/backfill", json={"from": from_ms, "to": to_ms})
    assert response.status_code == 202, response.text
    assert response.headers["location"] == f"/openapi/jobs/{job_id}/executions"
    answer: dict[str, Any] = response.json()
    BackfillAccepted.model_validate(answer)
    return answer


def test_backfill_creates_one_marked_run_per_missing_time_and_a_repeat_none(
    client: TestClient, engine: Engine, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    job_id = create(client, **EVERY_MINUTE)
    before = job_row(engine, job_id)
    end = minute_floor(client)
    answer = backfill(client, job_id, end - 10 * MINUTE, end)
    assert (answer["created"], answer["existing"], answer["leftToSchedule"]) == (10, 0, 0)
    rows = executions_of(engine, job_id)
    assert [r["trigger_time"] for r in rows] == [end - k * MINUTE for k in range(10, 0, -1)]
    job = job_row(engine, job_id)
    for row in rows:
        assert (row["status"], row["attempt"], row["manual"], row["backfill"]) == (
            "SCHEDULED",
            1,
            1,
            1,
        )
        assert row["execution_id"] == trigger_execution_id(
            job_id, job["created_at"], row["trigger_time"]
        )
    assert job == before  # the job's own schedule is untouched
    assert wake_length(redis_client, namespace) == 1
    again = backfill(client, job_id, end - 10 * MINUTE, end)
    assert (again["created"], again["existing"]) == (0, 10)
    assert len(executions_of(engine, job_id)) == 10
    shown = client.get(f"/openapi/jobs/{job_id}/executions?limit=100").json()["executions"]
    assert {(e["backfill"], e["manual"]) for e in shown} == {(True, True)}


def test_overlapping_ranges_create_only_the_times_not_yet_run(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, **EVERY_MINUTE)
    end = minute_floor(client)
    first = backfill(client, job_id, end - 10 * MINUTE, end - 5 * MINUTE)
    second = backfill(client, job_id, end - 8 * MINUTE, end)
    assert (first["created"], first["existing"]) == (5, 0)
    assert (second["created"], second["existing"]) == (5, 3)
    times = [r["trigger_time"] for r in executions_of(engine, job_id)]
    assert sorted(times) == [end - k * MINUTE for k in range(10, 0, -1)]


def test_a_time_the_schedule_ran_is_not_run_again(client: TestClient, engine: Engine) -> None:
    job_id = create(client, **EVERY_MINUTE)
    end = minute_floor(client)
    job = job_row(engine, job_id)
    ran = end - 3 * MINUTE
    with engine.begin() as conn:
        scheduled = NewExecution(
            trigger_execution_id(job_id, job["created_at"], ran), job_id, 1, ran, ran
        )
        insert_executions(conn, [scheduled], ran)
    answer = backfill(client, job_id, end - 5 * MINUTE, end)
    assert (answer["created"], answer["existing"]) == (4, 1)
    assert sum(r["trigger_time"] == ran for r in executions_of(engine, job_id)) == 1


def test_times_from_the_next_trigger_on_are_left_to_the_schedule(
    client: TestClient, engine: Engine
) -> None:
    now = api_state(client).clock.now_ms()
    start = now - 30_000
    job_id = create(client, fixedRateSeconds=10, triggerAt=start)
    answer = backfill(client, job_id, start - 30_000, now + 3_600_000)
    assert (answer["created"], answer["existing"]) == (3, 0)
    assert answer["leftToSchedule"] in (3, 4)  # now may fall on a time of the series
    assert sorted(r["trigger_time"] for r in executions_of(engine, job_id)) == [
        start - 30_000,
        start - 20_000,
        start - 10_000,
    ]


def test_to_later_than_now_counts_as_now(client: TestClient) -> None:
    job_id = create(client, **EVERY_MINUTE)
    end = minute_floor(client)
    answer = backfill(client, job_id, end - 2 * MINUTE, "2100-01-01T00:00:00Z")
    # end - 2, end - 1 and end (this minute's start: past, and before the job's first
    # trigger); one more if a minute began since
    assert answer["created"] in (3, 4)
    assert answer["to"] < "2100"


def test_iso_times_without_offset_are_wall_times_in_the_jobs_zone(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 3 * * *", timezone="Europe/Paris")
    answer = backfill(client, job_id, "2026-03-28T00:00:00", "2026-03-31T00:00:00")
    assert answer["from"] == "2026-03-27T23:00:00.000Z"
    assert answer["created"] == 3
    times = [r["trigger_time"] for r in executions_of(engine, job_id)]
    assert [iso_ms(t) for t in times] == [
        "2026-03-28T02:00:00.000Z",
        "2026-03-29T01:00:00.000Z",  # summer time from that night on
        "2026-03-30T01:00:00.000Z",
    ]


def test_past_the_bound_is_refused_naming_the_setting_and_nothing_is_written(
    client: TestClient, engine: Engine
) -> None:
    api_state(client).settings.backfill_max_runs = 5
    job_id = create(client, **EVERY_MINUTE)
    end = minute_floor(client)
    response = client.post(
        f"/openapi/jobs/{job_id}/backfill", json={"from": end - 6 * MINUTE, "to": end}
    )
    assert response.status_code == 422, response.text
    assert "KAIROS_BACKFILL_MAX_RUNS" in response.json()["detail"]
    assert executions_of(engine, job_id) == []
    assert backfill(client, job_id, end - 5 * MINUTE, end)["created"] == 5


@pytest.mark.parametrize(
    ("fields", "payload", "field"),
    [
        ({"triggerAt": FUTURE}, {"from": 0, "to": 60_000}, "jobId"),
        (EVERY_MINUTE, {"from": 120_000, "to": 60_000}, "to"),
        (EVERY_MINUTE, {"from": FUTURE, "to": FUTURE + 60_000}, "from"),
        (EVERY_MINUTE, {"from": "yesterday", "to": 60_000}, "from"),
        (EVERY_MINUTE, {"from": -5, "to": 60_000}, "from"),
    ],
)
def test_what_cannot_be_backfilled_is_a_422_naming_the_field(
    client: TestClient, engine: Engine, fields: dict[str, Any], payload: dict[str, Any], field: str
) -> None:
    job_id = create(client, **fields)
    response = client.post(f"/openapi/jobs/{job_id}/backfill", json=payload)
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith(f"{field}:"), response.text
    assert executions_of(engine, job_id) == []


@pytest.mark.parametrize(
    "payload", [{"from": 0}, {"from": 0, "to": None}, {"from": True, "to": 5}, {"to": 5}]
)
def test_a_malformed_body_is_a_422(client: TestClient, payload: dict[str, Any]) -> None:
    job_id = create(client, **EVERY_MINUTE)
    assert client.post(f"/openapi/jobs/{job_id}/backfill", json=payload).status_code == 422


@pytest.mark.parametrize(("action", "status"), [("pause", "PAUSED"), ("cancel", "CANCELLED")])
def test_a_paused_or_cancelled_job_is_refused_with_409(
    client: TestClient, engine: Engine, action: str, status: str
) -> None:
    job_id = create(client, **EVERY_MINUTE)
    client.post(f"/openapi/jobs/{job_id}/{action}")
    end = minute_floor(client)
    response = client.post(
        f"/openapi/jobs/{job_id}/backfill", json={"from": end - MINUTE, "to": end}
    )
    assert_refused(response, job_id, status, "WAITING or RUNNING", "backfilled")
    assert executions_of(engine, job_id) == []


def test_another_apps_job_is_not_found(
    client: TestClient, engine: Engine, namespace: StoreSettings
) -> None:
    job_id = create(client, **EVERY_MINUTE)
    other = make_app(engine, "other")
    response = client.post(
        f"/openapi/jobs/{job_id}/backfill",
        json={"from": 0, "to": MINUTE},
        headers={"Authorization": f"Bearer {other.api_key}"},
    )
    assert response.status_code == 404
    assert executions_of(engine, job_id) == []


def test_concurrent_overlapping_backfills_of_several_apps_create_each_time_once(
    client: TestClient, engine: Engine, namespace: StoreSettings
) -> None:
    """Eight callers per job, two apps, three jobs each: random overlapping ranges of the
    last 120 minutes at once; every time exists once, and the answers add up."""
    apps = [make_app(engine, "backfill-a"), make_app(engine, "backfill-b")]
    settings = ApiSettings(namespace=namespace.namespace)
    with TestClient(create_app(settings, public_names)) as api:
        made: list[tuple[str, int]] = []
        for app in apps:
            for k in range(3):
                response = api.post(
                    "/openapi/jobs",
                    json={"jobName": f"j{k}", "jobHandler": "demo.echo", "cronExpr": "* * * * *"},
                    headers={"Authorization": f"Bearer {app.api_key}"},
                )
                assert response.status_code == 202, response.text
                made.append((app.api_key, response.json()["jobId"]))
        end = minute_floor(api)
        start = end - 120 * MINUTE
        rng = random.Random(29)
        calls = []
        for key, job_id in made:
            calls.append((key, job_id, start, end))  # one call covers the whole range
            for _ in range(7):
                a, b = sorted(rng.sample(range(121), 2))
                calls.append((key, job_id, start + a * MINUTE, start + b * MINUTE))
        rng.shuffle(calls)

        def call(item: tuple[str, int, int, int]) -> tuple[int, dict[str, Any]]:
            key, job_id, lo, hi = item
            response = api.post(
                f"/openapi/jobs/{job_id}/backfill",
                json={"from": lo, "to": hi},
                headers={"Authorization": f"Bearer {key}"},
            )
            assert response.status_code == 202, response.text
            return job_id, response.json()

        with ThreadPoolExecutor(max_workers=8) as pool:
            answers = list(pool.map(call, calls))
    for _, job_id in made:
        rows = executions_of(engine, job_id)
        times = [r["trigger_time"] for r in rows]
        assert sorted(times) == [start + k * MINUTE for k in range(120)]
        mine = [a for j, a in answers if j == job_id]
        assert sum(a["created"] for a in mine) == 120
        spans = [(a["from"], a["to"]) for a in mine]
        assert len(spans) == 8
        for answer in mine:
            assert answer["leftToSchedule"] == 0


def test_the_insert_itself_creates_a_time_once_without_the_job_lock(
    client: TestClient, engine: Engine
) -> None:
    """Two transactions that both read a time as missing (no job lock between them):
    the second insert creates nothing and fails nothing."""
    job_id = create(client, **EVERY_MINUTE)
    end = minute_floor(client)
    with engine.connect() as conn:
        job = JobRecord.from_row(conn.execute(jobs.select().where(jobs.c.id == job_id)).one())
    rows = [backfill_execution(job, end - k * MINUTE, end) for k in (3, 2, 1)]
    with engine.begin() as first:
        assert insert_missing_executions(first, rows[:2], end) == 2
    with engine.begin() as second:
        assert insert_missing_executions(second, rows, end) == 1
    assert len(executions_of(engine, job_id)) == 3


def test_a_failed_backfill_run_is_retried_as_a_backfill_run_and_leaves_the_job_alone(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    job_id = create(client, maxRetries=1, retryBackoffSeconds=1, **EVERY_MINUTE)
    end = minute_floor(client)
    backfill(client, job_id, end - MINUTE, end)
    before = job_row(engine, job_id)
    [first] = executions_of(engine, job_id)
    record(engine, redis_client, job_id, first["execution_id"], "FAILED")
    rows = executions_of(engine, job_id)
    assert [(r["attempt"], r["status"], r["manual"], r["backfill"]) for r in rows] == [
        (1, "FAILED", 1, 1),
        (2, "SCHEDULED", 1, 1),
    ]
    assert rows[1]["trigger_time"] == first["trigger_time"]
    assert job_row(engine, job_id)["status"] == before["status"]
    assert job_row(engine, job_id)["next_trigger_time"] == before["next_trigger_time"]


# the rate limit: a backfill counts one request per run it creates


# One token every 100 s: no test depends on how fast its requests go.
SLOW_RATE = 0.01


def limited_client(namespace: StoreSettings, api_key: str, burst: int) -> TestClient:
    """The API with a slow rate limit of ``burst`` tokens, calling with ``api_key``."""
    settings = ApiSettings(
        namespace=namespace.namespace, rate_limit_per_second=SLOW_RATE, rate_limit_burst=burst
    )
    client = TestClient(create_app(settings, public_names))
    client.headers["Authorization"] = f"Bearer {api_key}"
    return client


def post_backfill(client: TestClient, job_id: int, from_ms: int, to_ms: int) -> Any:
    return client.post(f"/openapi/jobs/{job_id}/backfill", json={"from": from_ms, "to": to_ms})


def test_a_backfill_loop_meets_429_and_stops_creating_while_another_app_goes_on(
    namespace: StoreSettings, app_credentials: Any, engine: Engine
) -> None:
    other = make_app(engine, "other")
    with (
        limited_client(namespace, app_credentials.api_key, 30) as client,
        limited_client(namespace, other.api_key, 30) as other_client,
    ):
        job_id = create(client, **EVERY_MINUTE)  # 29 tokens left
        other_job = create(other_client, **EVERY_MINUTE)
        end = minute_floor(client)
        codes = []
        for k in range(8):  # ten runs a call, walking back in time: each would create ten
            to_ms = end - k * 10 * MINUTE
            response = post_backfill(client, job_id, to_ms - 10 * MINUTE, to_ms)
            codes.append(response.status_code)
            if response.status_code == 429:
                refused = response
        # 29 tokens: two calls of ten pay 20; the third has 9 left after its own token.
        assert codes[:3] == [202, 202, 429]
        assert set(codes[3:]) == {429}
        assert len(executions_of(engine, job_id)) == 20
        assert int(refused.headers["retry-after"]) >= 1
        assert refused.json()["type"] == "urn:kairos:problem:rate-limited"
        assert "one per run it creates" in refused.json()["detail"]
        # Another app's bucket is its own: its backfill within its budget still works.
        answer = post_backfill(other_client, other_job, end - 10 * MINUTE, end)
        assert answer.status_code == 202 and answer.json()["created"] == 10
        assert len(executions_of(engine, other_job)) == 10


def test_a_repeat_that_creates_nothing_costs_only_its_request(
    namespace: StoreSettings, app_credentials: Any, engine: Engine
) -> None:
    with limited_client(namespace, app_credentials.api_key, 8) as client:
        job_id = create(client, **EVERY_MINUTE)  # 7 left
        end = minute_floor(client)
        first = post_backfill(client, job_id, end - 4 * MINUTE, end)  # 3 left
        assert first.status_code == 202 and first.json()["created"] == 4
        for _ in range(3):
            again = post_backfill(client, job_id, end - 4 * MINUTE, end)
            assert again.status_code == 202 and again.json()["created"] == 0
        assert post_backfill(client, job_id, end - 4 * MINUTE, end).status_code == 429
    assert len(executions_of(engine, job_id)) == 4


def test_a_backfill_larger_than_the_bucket_passes_a_full_one_and_leaves_it_in_debt(
    namespace: StoreSettings, app_credentials: Any, engine: Engine, redis_client: redis.Redis
) -> None:
    with limited_client(namespace, app_credentials.api_key, 5) as client:
        job_id = create(client, **EVERY_MINUTE)
        # Wait out the create's token by moving the bucket's last count 100 s back.
        key = RedisKeys(namespace.namespace).rate_limit(app_credentials.app_id)
        redis_client.hset(key, "at", str(int(redis_client.hget(key, "at") or 0) - 100_000))
        end = minute_floor(client)
        answer = post_backfill(client, job_id, end - 8 * MINUTE, end)
        assert answer.status_code == 202 and answer.json()["created"] == 8
        # 5 tokens paid 8 runs: 3 owed, so the next call waits for 4 tokens (400 s).
        refused = client.get(f"/openapi/jobs/{job_id}")
        assert refused.status_code == 429
        assert 390 <= int(refused.headers["retry-after"]) <= 400
    assert len(executions_of(engine, job_id)) == 8


# the charge is paid before the job row is locked


def row_locked(engine: Engine, job_id: int) -> bool:
    """Whether another transaction holds the job's row lock now (asked without waiting)."""
    with engine.connect() as conn:
        try:
            conn.execute(
                sa.text("SELECT id FROM jobs WHERE id = :j FOR UPDATE NOWAIT"), {"j": job_id}
            )
        except OperationalError:
            return True
        finally:
            conn.rollback()
    return False


def backfill_charged(
    client: TestClient, app_key: str, job_id: int, span: tuple[int, int], charge: Any
) -> BackfillAccepted:
    """``backfill_job`` as the app's own call, paying ``charge``."""
    state = api_state(client)
    with state.engine.connect() as conn:
        app = MySqlAppStore(conn).find_app_by_key(app_key)
    assert app is not None
    body = BackfillRequest.model_validate({"from": span[0], "to": span[1]})
    return backfill_job(state, app, job_id, body, charge)


def test_the_rate_limit_is_paid_before_the_job_row_is_locked(
    client: TestClient, engine: Engine, app_credentials: Any
) -> None:
    jobs_made = [create(client, **EVERY_MINUTE) for _ in range(3)]
    end = minute_floor(client)
    charges: list[tuple[int, bool]] = []

    def charge(rows: int) -> None:
        # A slow Redis would hold whatever is locked now for as long as it takes.
        charges.append((rows, any(row_locked(engine, j) for j in jobs_made)))

    answer = backfill_charged(
        client, app_credentials.api_key, jobs_made[1], (end - 3 * MINUTE, end), charge
    )
    assert answer.created == 3
    assert charges == [(3, False)]
    assert [len(executions_of(engine, j)) for j in jobs_made] == [0, 3, 0]


def test_runs_made_meanwhile_keep_the_charge_and_runs_added_meanwhile_are_paid_first(
    client: TestClient, engine: Engine, app_credentials: Any
) -> None:
    job_id = create(client, cronExpr="*/2 * * * *")
    end = minute_floor(client) // (2 * MINUTE) * (2 * MINUTE)
    span = (end - 8 * MINUTE, end)
    charges: list[int] = []

    def run_one_meanwhile(rows: int) -> None:
        charges.append(rows)
        if len(charges) == 1:  # another backfill makes the first time's run meanwhile
            with engine.begin() as conn:
                job = JobRecord.from_row(
                    conn.execute(jobs.select().where(jobs.c.id == job_id)).one()
                )
                insert_missing_executions(conn, [backfill_execution(job, span[0], span[0])], 0)

    answer = backfill_charged(client, app_credentials.api_key, job_id, span, run_one_meanwhile)
    assert (answer.created, answer.existing, charges) == (3, 1, [4])  # one run over-charged

    other = create(client, cronExpr="*/2 * * * *")
    charges.clear()

    def every_minute_meanwhile(rows: int) -> None:
        charges.append(rows)
        if len(charges) == 1:  # the job's schedule is changed meanwhile: twice the times
            with engine.begin() as conn:
                conn.execute(jobs.update().where(jobs.c.id == other).values(cron_expr="* * * * *"))

    answer = backfill_charged(client, app_credentials.api_key, other, span, every_minute_meanwhile)
    assert (answer.created, charges) == (8, [4, 8])
    assert len(executions_of(engine, other)) == 8
