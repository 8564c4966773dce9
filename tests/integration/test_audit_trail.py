"""The audit trail at volume: several apps' keys, console operators and the CLI change
things at once, and every change is in audit_events, once, with its actor; a batch
writes one row; kairos audit and the console page read it within the reader's apps."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.audit import AuditQuery, find_audit, prune_audit
from common.db.schema import audit_events, jobs
from common.operator_roles import Role
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.helpers import make_app

Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def open_client(
    namespace: StoreSettings, app_credentials: AppCredentials
) -> Iterator[Callable[[], TestClient]]:
    """Opens API test clients on the test's namespace, each on an API of its own."""
    from services.api.app import create_app

    with ExitStack() as stack:
        yield lambda: stack.enter_context(
            TestClient(create_app(ApiSettings(namespace=namespace.namespace)))
        )


def body(name: str) -> dict[str, object]:
    return {"jobName": name, "jobHandler": "demo.noop", "cronExpr": "30 2 * * *"}


def rows(engine: Engine) -> list[sa.Row[tuple[object, ...]]]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(audit_events).order_by(audit_events.c.id)))


def rows_of(engine: Engine, action: str) -> list[sa.Row[tuple[object, ...]]]:
    return [r for r in rows(engine) if r.action == action]


def created_ids(engine: Engine, actor: str) -> list[int]:
    return [
        job_id
        for r in rows(engine)
        if r.action == "job.create" and r.actor == actor
        for job_id in json.loads(r.after_doc)["jobIds"]
    ]


def test_every_change_of_many_actors_at_once_is_recorded_once_with_its_actor(
    open_client: Callable[[], TestClient],
    engine: Engine,
    app_credentials: AppCredentials,
    cli: Cli,
) -> None:
    apps = [app_credentials, make_app(engine, "second")]
    per_app = 40

    def submit_and_pause(app: AppCredentials) -> None:
        client = open_client()
        headers = {"Authorization": f"Bearer {app.api_key}"}
        for i in range(per_app):
            answer = client.post("/openapi/jobs", json=body(f"{app.app_id}-{i}"), headers=headers)
            assert answer.status_code == 202, answer.text
            if i % 4 == 0:
                job_id = answer.json()["jobId"]
                paused = client.post(f"/openapi/jobs/{job_id}/pause", headers=headers)
                assert paused.status_code == 200, paused.text

    console = open_client()
    csrf = sign_in(console, make_operator(engine, "ada", Role.ADMIN))
    threads = [threading.Thread(target=submit_and_pause, args=(a,)) for a in apps]
    for thread in threads:
        thread.start()
    batch = open_client().post(
        "/openapi/jobs/batch",
        json={"jobs": [body(f"b{i}") for i in range(1_000)]},
        headers={"Authorization": f"Bearer {apps[0].api_key}"},
    )
    assert batch.status_code == 202, batch.text
    batch_ids = [j["jobId"] for j in batch.json()["jobs"]]
    for job_id in batch_ids[:10]:
        answer = console.post(f"/console/jobs/{job_id}/cancel", data={"csrf": csrf})
        assert answer.status_code == 200, answer.text
    assert cli("operator", "create", "vera", "--role", "viewer")[0] == 0
    for thread in threads:
        thread.join(timeout=120)

    with engine.connect() as conn:
        stored = {
            int(r.id): int(r.app_pk) for r in conn.execute(sa.select(jobs.c.id, jobs.c.app_pk))
        }
    assert len(stored) == 2 * per_app + 1_000
    # Every job created is listed once, under the key of the app that created it.
    for app in apps:
        with MySqlAppTransactions(engine).reading() as store:
            found = store.app_record(app.app_id)
        assert found is not None
        listed = created_ids(engine, app.key_id)
        assert sorted(listed) == sorted(j for j, pk in stored.items() if pk == found.id)
    assert len(rows_of(engine, "job.create")) < 2 * per_app + 10, "a batch writes one row"
    batch_rows = [r for r in rows(engine) if r.action == "job.create" and r.object_type == "jobs"]
    assert any(json.loads(r.after_doc)["count"] == 1_000 for r in batch_rows), "one row a batch"
    actions = Counter((r.actor, r.action) for r in rows(engine) if r.action != "job.create")
    for app in apps:
        assert actions[(app.key_id, "job.pause")] == per_app // 4
    assert actions[("ada", "job.cancel")] == 10
    cli_rows = [r for r in rows(engine) if r.action == "operator.create"]
    assert len(cli_rows) == 1 and cli_rows[0].actor.startswith("cli:")
    assert "token" not in cli_rows[0].after_doc
    cancelled = [r for r in rows(engine) if r.action == "job.cancel"]
    assert {json.loads(r.before_doc)["status"] for r in cancelled} == {"WAITING"}
    assert {json.loads(r.after_doc)["status"] for r in cancelled} == {"CANCELLED"}


def test_kairos_audit_and_the_console_page_read_within_the_readers_apps(
    open_client: Callable[[], TestClient],
    engine: Engine,
    app_credentials: AppCredentials,
    cli: Cli,
) -> None:
    other = make_app(engine, "other")
    client = open_client()
    for app in (app_credentials, other):
        headers = {"Authorization": f"Bearer {app.api_key}"}
        job_id = client.post("/openapi/jobs", json=body(app.app_id), headers=headers).json()[
            "jobId"
        ]
        assert client.post(f"/openapi/jobs/{job_id}/pause", headers=headers).status_code == 200
    assert (
        cli("operator", "create", "otto", "--role", "operator", "--app", app_credentials.app_id)[0]
        == 0
    )

    status, out, _ = cli("audit", "--app", other.app_id, "-o", "json")
    listed = json.loads(out)
    assert status == 0 and {r["action"] for r in listed} == {"job.create", "job.pause"}
    assert {r["appId"] for r in listed} == {other.app_id}
    status, out, _ = cli("audit", "--actor", app_credentials.key_id, "--since", "1h", "-o", "json")
    assert {r["actor"] for r in json.loads(out)} == {app_credentials.key_id}
    status, out, _ = cli("audit", "--since", "2999-01-01T00:00:00", "-o", "json")
    assert json.loads(out) == []
    status, out, _ = cli("audit")
    assert "operator.create" in out and "operator:otto" in out

    with MySqlAppTransactions(engine).reading() as apps:
        pk = apps.app_record(app_credentials.app_id)
    assert pk is not None
    scoped = open_client()
    sign_in(scoped, make_operator(engine, "ops", Role.OPERATOR, [pk.id]))
    page = scoped.get("/console/audit").text
    assert app_credentials.app_id in page and other.app_id not in page
    assert "operator.create" not in page, "rows of no app are for admins of every app"
    assert scoped.get(f"/console/audit?app={other.app_id}").status_code == 404
    admin = open_client()
    sign_in(admin, make_operator(engine, "ada", Role.ADMIN))
    whole = admin.get("/console/audit").text
    assert other.app_id in whole and "operator.create" in whole
    viewer = open_client()
    sign_in(viewer, make_operator(engine, "vera", Role.VIEWER))
    assert viewer.get("/console/audit").status_code == 403


def test_retention_prunes_audit_rows_past_their_age(
    open_client: Callable[[], TestClient], engine: Engine, app_credentials: AppCredentials
) -> None:
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    assert open_client().post("/openapi/jobs", json=body("x"), headers=headers).status_code == 202
    with engine.begin() as conn:
        conn.execute(audit_events.update().values(at=1))
        assert prune_audit(conn, 1_000, limit=10) == 1
        assert find_audit(conn, AuditQuery()) == []


def test_app_commands_are_audited_with_the_app_before_and_after_and_no_secret(
    engine: Engine, cli: Cli
) -> None:
    status, out, _ = cli("app", "create", "billing", "--handlers", "report.*")
    created = json.loads(out)
    app_id = created["appId"]
    assert cli("app", "handlers", app_id, "--allow", "report.*,bill.*")[0] == 0
    assert cli("app", "rotate-key", app_id, "--overlap-hours", "0")[0] == 0
    assert cli("app", "rotate-secret", app_id)[0] == 0
    assert cli("app", "disable", app_id)[0] == 0
    assert cli("app", "limits", app_id, "--max-jobs", "100")[0] == 0
    assert cli("app", "networks", app_id, "--allow", "10.1.0.0/16")[0] == 0
    assert cli("app", "limits", app_id)[0] == 0, "reading changes nothing"
    status, out, _ = cli("audit", "--app", app_id, "-o", "json")
    assert status == 0
    actions = Counter(r["action"] for r in json.loads(out))
    assert set(actions.values()) == {1}, actions
    listed = {r["action"]: r for r in json.loads(out)}
    assert set(listed) == {
        "app.create",
        "app.handlers",
        "app.rotate_key",
        "app.rotate_secret",
        "app.disable",
        "app.limits",
        "app.networks",
    }
    assert listed["app.limits"]["after"]["limits"]["max_jobs"] == 100
    assert listed["app.networks"]["after"]["callbackNetworks"] == ["10.1.0.0/16"]
    assert all(r["actor"].startswith("cli:") for r in listed.values())
    handlers = listed["app.handlers"]
    assert handlers["before"]["handlers"] == ["report.*"]
    assert handlers["after"]["handlers"] == ["report.*", "bill.*"]
    assert listed["app.disable"]["after"]["disabled"] is True
    text = json.dumps(list(listed.values()))
    assert created["apiKey"] not in text and created["signingSecret"] not in text


def test_a_patch_records_the_changed_fields_before_and_after_and_a_delete_its_status(
    open_client: Callable[[], TestClient], engine: Engine, app_credentials: AppCredentials
) -> None:
    client = open_client()
    headers = {"Authorization": f"Bearer {app_credentials.api_key}"}
    job_id = client.post("/openapi/jobs", json=body("p"), headers=headers).json()["jobId"]
    patched = client.patch(f"/openapi/jobs/{job_id}", json={"priority": 9}, headers=headers)
    assert patched.status_code == 200, patched.text
    assert client.delete(f"/openapi/jobs/{job_id}", headers=headers).status_code in (200, 204)
    [update] = rows_of(engine, "job.update")
    assert json.loads(update.before_doc) == {"priority": 5}
    assert json.loads(update.after_doc) == {"priority": 9}
    assert update.actor == app_credentials.key_id
    [deleted] = rows_of(engine, "job.delete")
    assert json.loads(deleted.after_doc) == {"status": "CANCELLED"}
