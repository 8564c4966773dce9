"""cronExpr at the API: what is refused, previews across DST, and where the CPU goes."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.timefmt import iso_ms, parse_instant


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"jobName": "report", "jobHandler": "demo.echo"}
    base.update(overrides)
    return base


def job_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT COUNT(*) FROM jobs")).scalar_one())


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("R * * * *", "R (a random value) is not supported"),
        ("H * * * *", "H (a hashed value) is not supported"),
        ("0 0 ? * MON", "'?' (no specific value) is not supported"),
        ("0 0 15W * *", "W (nearest weekday) is not supported"),
        ("0 0 * * 5L", "L is accepted only alone in day of month"),
        ("0 0 0 1 1 * 2027", "has 7 fields"),
        ("0 22-2 * * *", "a range must go upward"),
    ],
)
def test_cron_extensions_are_refused_naming_cron_expr(
    client: TestClient, engine: Engine, expr: str, reason: str
) -> None:
    created = client.post("/openapi/jobs", json=body(cronExpr=expr))
    batch = client.post("/openapi/jobs/batch", json={"jobs": [body(), body(cronExpr=expr)]})
    assert created.status_code == 422
    assert created.json()["errors"][0]["field"] == "cronExpr"
    assert reason in created.json()["detail"]
    assert batch.status_code == 422
    assert "jobs[1].cronExpr" in str(batch.json())
    assert job_count(engine) == 0


def test_a_patch_to_a_random_cron_is_refused(client: TestClient) -> None:
    job_id = client.post("/openapi/jobs", json=body(cronExpr="0 0 1 1 *")).json()["jobId"]
    response = client.patch(f"/openapi/jobs/{job_id}", json={"cronExpr": "R * * * *"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "cronExpr"
    assert client.get(f"/openapi/jobs/{job_id}").json()["cronExpr"] == "0 0 1 1 *"


def test_preview_of_an_every_second_cron_crosses_the_spring_forward(client: TestClient) -> None:
    # Paris skips 02:00-03:00 on 2027-03-28 (01:00Z): every second still fires once.
    start = parse_instant("2027-03-28T00:59:10Z")
    job = body(cronExpr="* * * * * *", timezone="Europe/Paris", triggerAt=start)
    job_id = client.post("/openapi/jobs", json=job).json()["jobId"]
    response = client.get(f"/openapi/jobs/{job_id}?preview=100")
    assert response.status_code == 200
    expected = [iso_ms(start + n * 1000) for n in range(100)]
    assert response.json()["nextTriggerTimes"] == expected


def test_preview_asks_for_at_most_100_times(client: TestClient) -> None:
    job_id = client.post("/openapi/jobs", json=body(cronExpr="* * * * * *")).json()["jobId"]
    assert client.get(f"/openapi/jobs/{job_id}?preview=101").status_code == 422


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _recording(real: Callable[..., Any], seen: list[tuple[str, bool]]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        seen.append((threading.current_thread().name, _on_event_loop()))
        return real(*args, **kwargs)

    return wrapper


def test_cron_times_are_computed_off_the_event_loop(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creates (the first fills the caches, the rest take the fast path), a PATCH and a
    preview all compute cron times in a worker thread, never on the event loop."""
    seen: list[tuple[str, bool]] = []
    for target in ("common.schedule.next_trigger_ms", "services.api.validation.validate_cron"):
        module, name = target.rsplit(".", 1)
        real = getattr(importlib.import_module(module), name)
        monkeypatch.setattr(target, _recording(real, seen))
    ids = [
        client.post("/openapi/jobs", json=body(cronExpr="*/5 * * * * *")).json()["jobId"]
        for _ in range(3)
    ]
    assert client.patch(f"/openapi/jobs/{ids[0]}", json={"cronExpr": "0 * * * *"}).is_success
    assert client.get(f"/openapi/jobs/{ids[1]}?preview=10").is_success
    assert len(seen) >= 3 * 2 + 2 + 9
    assert [where for where in seen if where[1]] == []
