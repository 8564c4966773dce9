"""An app sees its own callbacks (state, attempts, next attempt), paged, and replays a
DELIVERED or DEAD one; another app's are a 404, one on its way a 409."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.db.deliveries import NewAttempt, NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.states import DeadReason, DeliveryStatus
from tests.integration.helpers import make_app

BASE_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def job(client: TestClient) -> int:
    created = client.post(
        "/openapi/jobs",
        json={
            "jobName": "j",
            "jobHandler": "demo.noop",
            "triggerAt": "2100-01-01T00:00:00Z",
            "callbackUrl": "https://example.com/hook",
        },
    )
    assert created.status_code == 202, created.text
    job_id: int = created.json()["jobId"]
    return job_id


def add_delivery(engine: Engine, job_id: int) -> str:
    """A recorded delivery of ``job_id`` (of app 1); returns its id."""
    delivery_id = "msg_" + uuid.uuid4().hex
    with engine.begin() as conn:
        row = NewDelivery(delivery_id, str(uuid.uuid4()), job_id, 1, "https://x/h", "{}")
        MySqlDeliveryStore(conn).insert_deliveries([row], BASE_MS)
    return delivery_id


def attempt(engine: Engine, delivery_id: str, number: int, **fields: object) -> None:
    record = NewAttempt(
        delivery_id=delivery_id,
        attempt=number,
        status=fields.pop("status", DeliveryStatus.RETRYING),  # type: ignore[arg-type]
        status_code=fields.pop("status_code", 500),  # type: ignore[arg-type]
        error=fields.pop("error", "HTTP 500"),  # type: ignore[arg-type]
        duration_ms=12,
        **fields,  # type: ignore[arg-type]
    )
    with engine.begin() as conn:
        MySqlDeliveryStore(conn).record_attempts([record], BASE_MS + number * 1000)


def test_a_delivery_shows_its_state_attempts_and_next_attempt(
    client: TestClient, engine: Engine
) -> None:
    job_id = job(client)
    delivery_id = add_delivery(engine, job_id)
    attempt(engine, delivery_id, 1, next_attempt_at=BASE_MS + 6000)
    response = client.get(f"/openapi/jobs/{job_id}/callbacks")
    assert response.status_code == 200, response.text
    (shown,) = response.json()["deliveries"]
    assert shown["deliveryId"] == delivery_id
    assert shown["state"] == "RETRYING"
    assert shown["nextAttemptAt"] == "2027-01-15T08:00:06.000Z"
    assert shown["attempts"] == [
        {
            "attempt": 1,
            "at": "2027-01-15T08:00:01.000Z",
            "statusCode": 500,
            "error": "HTTP 500",
            "durationMs": 12,
        }
    ]
    attempt(engine, delivery_id, 2, status=DeliveryStatus.DELIVERED, status_code=204, error=None)
    (shown,) = client.get(f"/openapi/jobs/{job_id}/callbacks").json()["deliveries"]
    assert shown["state"] == "DELIVERED" and shown["nextAttemptAt"] is None
    assert [a["statusCode"] for a in shown["attempts"]] == [500, 204]


def test_a_late_duplicate_never_overwrites_delivered(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    delivery_id = add_delivery(engine, job_id)
    attempt(engine, delivery_id, 1, status=DeliveryStatus.DELIVERED, status_code=200, error=None)
    attempt(engine, delivery_id, 1, status=DeliveryStatus.DEAD, dead_reason=DeadReason.GONE)
    (shown,) = client.get(f"/openapi/jobs/{job_id}/callbacks").json()["deliveries"]
    assert shown["state"] == "DELIVERED"
    assert len(shown["attempts"]) == 2, "the duplicate's attempt is recorded all the same"


def test_deliveries_page_newest_first_without_gaps(client: TestClient, engine: Engine) -> None:
    job_id = job(client)
    made = [add_delivery(engine, job_id) for _ in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        query = "?limit=3" + (f"&cursor={cursor}" if cursor else "")
        body = client.get(f"/openapi/jobs/{job_id}/callbacks{query}").json()
        seen += [d["deliveryId"] for d in body["deliveries"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert seen == made[::-1]
    bad = client.get(f"/openapi/jobs/{job_id}/callbacks?cursor=abc")
    assert bad.status_code == 422
    assert bad.json()["type"] == "urn:kairos:problem:validation-failed"


def test_another_apps_job_and_delivery_are_not_found(
    client: TestClient, engine: Engine, namespace: object
) -> None:
    job_id = job(client)
    delivery_id = add_delivery(engine, job_id)
    attempt(engine, delivery_id, 1, status=DeliveryStatus.DEAD, dead_reason=DeadReason.GONE)
    other = make_app(engine, "other")
    headers = {"Authorization": f"Bearer {other.api_key}"}
    listed = client.get(f"/openapi/jobs/{job_id}/callbacks", headers=headers)
    assert listed.status_code == 404
    assert listed.json()["type"] == "urn:kairos:problem:job-not-found"
    replay = client.post(f"/openapi/callbacks/{delivery_id}/replay", headers=headers)
    assert replay.status_code == 404
    assert replay.json()["type"] == "urn:kairos:problem:callback-not-found"
    assert replay.json()["deliveryId"] == delivery_id


def status_of(engine: Engine, delivery_id: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(
                sa.text("SELECT status FROM callback_deliveries WHERE delivery_id = :d"),
                {"d": delivery_id},
            ).scalar_one()
        )


def test_a_dead_or_delivered_callback_is_replayed_one_on_its_way_is_not(
    client: TestClient, engine: Engine
) -> None:
    job_id = job(client)
    dead, delivered, retrying = (add_delivery(engine, job_id) for _ in range(3))
    attempt(engine, dead, 1, status=DeliveryStatus.DEAD, dead_reason=DeadReason.EXHAUSTED)
    attempt(engine, delivered, 1, status=DeliveryStatus.DELIVERED, status_code=204, error=None)
    attempt(engine, retrying, 1, next_attempt_at=BASE_MS + 5000)
    for delivery_id in (dead, delivered):
        response = client.post(f"/openapi/callbacks/{delivery_id}/replay")
        assert response.status_code == 202, response.text
        assert response.json() == {"deliveryId": delivery_id, "state": "PENDING"}
        assert status_of(engine, delivery_id) == "PENDING", "the dispatcher's sweep sends it"
    refused = client.post(f"/openapi/callbacks/{retrying}/replay")
    assert refused.status_code == 409
    assert refused.json()["type"] == "urn:kairos:problem:callback-in-flight"
    assert refused.json()["deliveryState"] == "RETRYING"
    again = client.post(f"/openapi/callbacks/{dead}/replay")
    assert again.status_code == 409, "a replay on its way is not replayed twice"
    unknown = client.post(f"/openapi/callbacks/msg_{'0' * 32}/replay")
    assert unknown.status_code == 404
    malformed = client.post("/openapi/callbacks/nope/replay")
    assert malformed.status_code == 422
