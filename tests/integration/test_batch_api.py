"""POST /openapi/jobs/batch against real MySQL and Redis: all or nothing, by index."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db import driver
from common.db import jobs as job_rows
from common.db.apps import AppCredentials
from common.keys import RedisKeys
from services.api import batch, idempotency

BATCH = "/openapi/jobs/batch"
IN_ONE_HOUR = int(time.time() * 1000) + 3_600_000


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


def names_by_id(engine: Engine) -> dict[int, str]:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT id, job_name FROM jobs")).all()
    return {int(r.id): str(r.job_name) for r in rows}


def item(index: int, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "jobName": f"job {index}",
        "jobHandler": "demo.echo",
        "params": {"i": index},
        "triggerAt": IN_ONE_HOUR,
    }
    base.update(overrides)
    return base


def ids_of(response: Any) -> list[int]:
    return [answer["jobId"] for answer in response.json()["jobs"]]


def test_batch_answers_202_with_ids_in_request_order(client: TestClient, engine: Engine) -> None:
    items = [item(0), item(1, cronExpr="0 2 * * *", triggerAt=None), item(2, params={})]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 202
    assert [a["status"] for a in response.json()["jobs"]] == ["WAITING"] * 3
    for index, job_id in enumerate(ids_of(response)):
        job = client.get(f"/openapi/jobs/{job_id}").json()
        assert job["jobName"] == f"job {index}"
        assert job["params"] == items[index]["params"]
    assert client.get(f"/openapi/jobs/{ids_of(response)[1]}").json()["cronExpr"] == "0 2 * * *"
    assert job_count(engine) == 3


def test_values_round_trip_whatever_their_characters(client: TestClient) -> None:
    tricky = {"s": 'it\'s 100% \\ "quoted" %s %(x)s ✓', "n": None, "list": [1, 2.5]}
    items = [item(0, params=tricky, callbackUrl="https://example.com/h?a=1&b=%20"), item(1)]
    job_id = ids_of(client.post(BATCH, json={"jobs": items}))[0]
    job = client.get(f"/openapi/jobs/{job_id}").json()
    assert job["params"] == tricky
    assert job["callbackUrl"] == "https://example.com/h?a=1&b=%20"
    assert job["cronExpr"] is None


def test_a_full_batch_maps_every_id_to_its_item(client: TestClient, engine: Engine) -> None:
    response = client.post(BATCH, json={"jobs": [item(i) for i in range(1000)]})
    assert response.status_code == 202
    ids = ids_of(response)
    assert names_by_id(engine) == {job_id: f"job {i}" for i, job_id in enumerate(ids)}


def test_ids_are_read_back_when_the_server_does_not_promise_consecutive_ones(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "consecutive_id_step", lambda _conn: None)
    client.post("/openapi/jobs", json=item(99))
    response = client.post(BATCH, json={"jobs": [item(i) for i in range(50)]})
    assert response.status_code == 202
    names = names_by_id(engine)
    assert [names[job_id] for job_id in ids_of(response)] == [f"job {i}" for i in range(50)]
    with engine.connect() as conn:
        marked = conn.execute(sa.text("SELECT COUNT(*) FROM jobs WHERE claim_token IS NOT NULL"))
        assert marked.scalar_one() == 0


def test_one_bad_item_rejects_the_batch_naming_its_index(
    client: TestClient, engine: Engine
) -> None:
    items = [item(0), item(1), item(2), item(3, cronExpr="99 * * * *", triggerAt=None)]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["detail"].startswith("jobs[3]: cronExpr")
    assert [e["field"] for e in problem["errors"]] == ["jobs[3].cronExpr"]
    assert job_count(engine) == 0


def test_every_bad_item_is_listed_and_the_detail_names_the_first(
    client: TestClient, engine: Engine
) -> None:
    items = [
        item(0),
        item(1, jobHandler="no.such"),
        item(2),
        item(3, callbackUrl="ftp://example.com/hook"),
    ]
    problem = client.post(BATCH, json={"jobs": items}).json()
    assert problem["detail"].startswith("jobs[1]: jobHandler")
    fields = [e["field"] for e in problem["errors"]]
    assert fields == ["jobs[1].jobHandler", "jobs[3].callbackUrl"]
    assert job_count(engine) == 0


def test_a_malformed_item_is_named_by_index(client: TestClient, engine: Engine) -> None:
    items = [item(0), item(1), {"jobHandler": "demo.echo"}]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[2].jobName"]
    assert job_count(engine) == 0


@pytest.mark.parametrize("size", [0, 1001])
def test_a_batch_outside_1_to_1000_items_is_422(
    client: TestClient, engine: Engine, size: int
) -> None:
    response = client.post(BATCH, json={"jobs": [item(i) for i in range(size)]})
    assert response.status_code == 422
    assert "1000" in response.json()["detail"] or size == 0
    assert job_count(engine) == 0


def test_params_too_large_for_one_insert_are_422(
    namespace: StoreSettings, app_credentials: AppCredentials, engine: Engine
) -> None:
    """Only with a body limit raised past them (KAIROS_MAX_BODY_BYTES, 1 MiB by default)."""
    from services.api.app import create_app

    blob = "x" * (60 * 1024)
    count = batch.MAX_BATCH_PARAMS_BYTES // len(blob) + 1
    settings = ApiSettings(namespace=namespace.namespace, max_body_bytes=8 * 1024 * 1024)
    with TestClient(create_app(settings)) as client:
        response = client.post(
            BATCH,
            json={"jobs": [item(i, params={"b": blob}) for i in range(count)]},
            headers={"Authorization": f"Bearer {app_credentials.api_key}"},
        )
    assert response.status_code == 422
    assert "split it" in response.json()["detail"]
    assert job_count(engine) == 0


def test_retrying_the_whole_batch_returns_the_same_jobs(client: TestClient, engine: Engine) -> None:
    items = [item(i, clientRequestId=f"r-{i}") for i in range(5)]
    first = client.post(BATCH, json={"jobs": items})
    again = client.post(BATCH, json={"jobs": items})
    assert first.status_code == 202 and "idempotent-replayed" not in first.headers
    assert again.status_code == 202 and again.headers["idempotent-replayed"] == "true"
    assert ids_of(again) == ids_of(first)
    assert again.headers["location"] == first.headers["location"]
    assert job_count(engine) == 5


def test_new_and_earlier_items_mix_each_answered_as_first_created(
    client: TestClient, engine: Engine
) -> None:
    earlier = client.post("/openapi/jobs", json=item(0, clientRequestId="r-0")).json()["jobId"]
    client.post(f"/openapi/jobs/{earlier}/pause")
    items = [item(1), item(0, clientRequestId="r-0"), item(2, clientRequestId="r-2")]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 202 and "idempotent-replayed" not in response.headers
    answers = response.json()["jobs"]
    assert answers[1] == {"jobId": earlier, "status": "WAITING"}  # as its create answered
    assert [a["status"] for a in (answers[0], answers[2])] == ["WAITING", "WAITING"]
    assert names_by_id(engine)[answers[2]["jobId"]] == "job 2"
    assert job_count(engine) == 3


def test_a_client_request_id_reused_with_another_body_rejects_the_batch(
    client: TestClient, engine: Engine
) -> None:
    earlier = client.post("/openapi/jobs", json=item(0, clientRequestId="r-0")).json()["jobId"]
    items = [item(1), item(2, clientRequestId="r-0")]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422
    problem = response.json()
    assert problem["detail"].startswith("jobs[1]: clientRequestId 'r-0'")
    assert "different body" in problem["detail"]
    assert problem["errors"][0]["field"] == "jobs[1].clientRequestId"
    assert problem["errors"][0]["jobId"] == earlier
    assert job_count(engine) == 1


def test_the_same_client_request_id_twice_in_one_batch_is_422(
    client: TestClient, engine: Engine
) -> None:
    items = [item(0, clientRequestId="dup"), item(1), item(0, clientRequestId="dup")]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == ["jobs[2].clientRequestId"]
    assert "repeats jobs[0]" in response.json()["detail"]
    assert job_count(engine) == 0


def test_client_request_ids_compare_exactly(client: TestClient, engine: Engine) -> None:
    earlier = client.post("/openapi/jobs", json=item(0, clientRequestId="Order-1")).json()
    other = client.post(BATCH, json={"jobs": [item(0, clientRequestId="order-1")]})
    assert other.status_code == 202 and ids_of(other) != [earlier["jobId"]]
    keys = ["a-1", "A-1", "a-1 "]
    apart = client.post(BATCH, json={"jobs": [item(1, clientRequestId=k) for k in keys]})
    assert apart.status_code == 202, apart.text
    assert len(set(ids_of(apart))) == 3
    assert job_count(engine) == 5


def test_a_concurrent_duplicate_is_found_on_the_second_look(
    client: TestClient, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = client.post("/openapi/jobs", json=item(0, clientRequestId="r-0")).json()["jobId"]
    real_lookup = job_rows.keyed_jobs
    calls: list[int] = []

    def miss_once(*args: Any) -> Any:
        calls.append(1)
        rows = real_lookup(*args)
        return [None] * len(rows) if len(calls) == 1 else rows

    monkeypatch.setattr(idempotency, "keyed_jobs", miss_once)
    items = [item(1), item(0, clientRequestId="r-0")]
    response = client.post(BATCH, json={"jobs": items})
    assert response.status_code == 202
    assert ids_of(response)[1] == earlier
    assert len(calls) == 2
    assert job_count(engine) == 2


def test_a_batch_due_now_wakes_the_dispatcher_once(
    client: TestClient, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    wake = RedisKeys(namespace.namespace).wake
    client.post(BATCH, json={"jobs": [item(0)]})
    assert redis_client.llen(wake) == 0
    client.post(BATCH, json={"jobs": [item(1, triggerAt=None), item(2, triggerAt=None)]})
    assert redis_client.llen(wake) == 1


def test_openapi_document_names_the_batch_operation(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    assert spec["paths"]["/openapi/jobs/batch"]["post"]["operationId"] == "createJobsBatch"
