"""jitterSeconds on real MySQL and Redis: validated at create, batch and patch (422,
nothing written), stored and shown with the fire times in previews, and applied by the
claim: the execution keeps its trigger time and id, and fires at the jittered time."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.execution_ids import trigger_execution_id
from common.jitter import jitter_offset_ms
from common.timefmt import parse_instant
from tests.integration.control_helpers import (
    FUTURE,
    api_state,
    body,
    claim_due,
    create,
    executions_of,
    job_row,
)
from tests.integration.helpers import make_app


def _jobs_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT COUNT(*) FROM jobs").scalar_one())


def _refused(response: Any, words: str) -> None:
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["field"].endswith("jitterSeconds"), error
    assert words in error["message"], error


def test_jitter_is_stored_shown_and_previewed_with_fire_times(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="0 * * * *", jitterSeconds=600)
    assert job_row(engine, job_id)["jitter_seconds"] == 600
    view = client.get(f"/openapi/jobs/{job_id}?preview=5").json()
    assert view["policies"]["jitterSeconds"] == 600
    triggers = [parse_instant(t) for t in view["nextTriggerTimes"]]
    fires = [parse_instant(t) for t in view["nextFireTimes"]]
    assert len(triggers) == len(fires) == 5
    assert fires == [t + jitter_offset_ms(job_id, t, 600) for t in triggers]
    assert all(0 <= f - t < 600_000 for t, f in zip(triggers, fires, strict=True))
    assert len({f - t for t, f in zip(triggers, fires, strict=True)}) > 1


def test_a_job_without_jitter_previews_fire_times_equal_to_its_triggers(
    client: TestClient,
) -> None:
    job_id = create(client, fixedRateSeconds=60)
    view = client.get(f"/openapi/jobs/{job_id}?preview=3").json()
    assert view["policies"]["jitterSeconds"] == 0
    assert view["nextFireTimes"] == view["nextTriggerTimes"]
    assert "nextFireTimes" in client.get(f"/openapi/jobs/{job_id}").json()


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"triggerAt": FUTURE, "jitterSeconds": 5}, "one-shot"),
        ({"jitterSeconds": 5}, "one-shot"),
        ({"fixedRateSeconds": 60, "jitterSeconds": 60}, "less than 60"),
        ({"cronExpr": "* * * * *", "jitterSeconds": 61}, "less than 60"),
        ({"cronExpr": "0 9,10 * * *", "jitterSeconds": 3_600}, "less than 3600"),
    ],
)
def test_jitter_on_a_one_shot_job_or_not_below_the_interval_is_a_422(
    client: TestClient, engine: Engine, fields: dict[str, Any], words: str
) -> None:
    _refused(client.post("/openapi/jobs", json=body(**fields)), words)
    assert _jobs_count(engine) == 0


@pytest.mark.parametrize("value", [-1, 86_401, True, 1.5])
def test_jitter_out_of_bounds_or_not_a_whole_number_is_a_422(
    client: TestClient, engine: Engine, value: Any
) -> None:
    response = client.post("/openapi/jobs", json=body(fixedRateSeconds=86_400, jitterSeconds=value))
    assert response.status_code == 422, response.text
    assert _jobs_count(engine) == 0


def test_a_batch_with_one_bad_jitter_writes_nothing_and_names_the_item(
    client: TestClient, engine: Engine
) -> None:
    jobs = [body(cronExpr="* * * * *", jitterSeconds=30) for _ in range(3)]
    jobs.append(body(jitterSeconds=30))
    response = client.post("/openapi/jobs/batch", json={"jobs": jobs})
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[3].jitterSeconds"]
    assert _jobs_count(engine) == 0
    ok = client.post("/openapi/jobs/batch", json={"jobs": jobs[:3]})
    assert ok.status_code == 202
    assert [job_row(engine, j["jobId"])["jitter_seconds"] for j in ok.json()["jobs"]] == [30] * 3


def test_a_patch_sets_jitter_and_is_held_to_the_schedule(
    client: TestClient, engine: Engine
) -> None:
    job_id = create(client, cronExpr="*/10 * * * *")
    patched = client.patch(f"/openapi/jobs/{job_id}", json={"jitterSeconds": 599})
    assert patched.status_code == 200, patched.text
    assert patched.json()["policies"]["jitterSeconds"] == 599
    before = job_row(engine, job_id)
    _refused(
        client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "* * * * *"}), "less than 60"
    )
    _refused(client.patch(f"/openapi/jobs/{job_id}", json={"jitterSeconds": 600}), "less than 600")
    assert client.patch(f"/openapi/jobs/{job_id}", json={"jitterSeconds": None}).status_code == 422
    assert job_row(engine, job_id) == before
    one_shot = create(client, triggerAt=FUTURE)
    _refused(client.patch(f"/openapi/jobs/{one_shot}", json={"jitterSeconds": 1}), "one-shot")
    cleared = client.patch(f"/openapi/jobs/{job_id}", json={"jitterSeconds": 0})
    assert cleared.json()["policies"]["jitterSeconds"] == 0


def test_a_retried_create_with_the_same_client_request_id_and_jitter_replays(
    client: TestClient,
) -> None:
    request = body(cronExpr="0 * * * *", jitterSeconds=10, clientRequestId="r-1")
    first = client.post("/openapi/jobs", json=request)
    again = client.post("/openapi/jobs", json=request)
    assert first.status_code == again.status_code == 202
    assert first.json()["jobId"] == again.json()["jobId"]
    other = client.post("/openapi/jobs", json={**request, "jitterSeconds": 11})
    assert other.status_code == 422


def test_the_claim_fires_each_trigger_at_its_jittered_time_under_its_own_id(
    client: TestClient, engine: Engine, redis_client: redis.Redis
) -> None:
    """Three apps, 20 jobs each on one minute's schedule with 50 s of jitter, all due
    at one trigger time: every claimed run keeps that trigger time and the id derived
    from it, and fires at the trigger plus the job's offset, spread over the 50 s."""
    now = api_state(client).clock.now_ms()
    trigger = now - now % 60_000
    auths = [client.headers["Authorization"]] + [
        f"Bearer {make_app(engine, f'jitter-{n}').api_key}" for n in range(2)
    ]
    job_ids = []
    for auth in auths:
        for _ in range(20):
            made = client.post(
                "/openapi/jobs",
                json=body(cronExpr="* * * * *", jitterSeconds=50, misfireThresholdSeconds=3600),
                headers={"Authorization": auth},
            )
            assert made.status_code == 202, made.text
            job_ids.append(made.json()["jobId"])
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE jobs SET next_trigger_time = %s", (trigger,))
    claim_due(engine, redis_client)
    offsets = []
    for job_id in job_ids:
        [run] = executions_of(engine, job_id)
        job = job_row(engine, job_id)
        offset = jitter_offset_ms(job_id, trigger, 50)
        assert run["trigger_time"] == trigger
        assert run["execution_id"] == trigger_execution_id(job_id, job["created_at"], trigger)
        assert run["scheduled_at"] == max(trigger + offset, run["created_at"])
        assert job["next_trigger_time"] == trigger + 60_000
        offsets.append(offset)
    assert len({o // 10_000 for o in offsets}) == 5, offsets
