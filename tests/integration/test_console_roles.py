"""Console roles over HTTP: a viewer, an operator limited to one app and an admin, on two
apps. Every page and action is allowed or refused as the roles say, lists show only the
apps an operator reaches, and another app's object is a 404 as one that does not exist."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import ApiSettings, StoreSettings
from common.db.apps import AppCredentials, MySqlAppTransactions
from common.db.deliveries import NewDelivery
from common.db.delivery_store import MySqlDeliveryStore
from common.db.schema import executions, jobs
from common.keys import RedisKeys
from common.operator_roles import Role
from tests.integration.console_helpers import make_operator, sign_in
from tests.integration.helpers import make_app, register_worker


@dataclass
class Signed:
    """A browser signed in as one operator, with its forms' CSRF token."""

    client: TestClient
    csrf: str

    def post(self, path: str, **fields: str) -> tuple[int, str]:
        answer = self.client.post(path, data={"csrf": self.csrf, **fields})
        return answer.status_code, answer.text


@dataclass
class Cluster:
    """Two apps with a job each, and the three operators' browsers."""

    a: AppCredentials
    b: AppCredentials
    job_a: int
    job_b: int
    viewer: Signed
    scoped: Signed
    admin: Signed


Browsers = Callable[[], TestClient]


@pytest.fixture
def api(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[Browsers]:
    """Opens browsers: each on an API process of its own on the test's namespace (an
    API's async clients belong to the event loop its test client runs)."""
    from services.api.app import create_app

    with ExitStack() as stack:

        def open_browser() -> TestClient:
            app = create_app(ApiSettings(namespace=namespace.namespace))
            return stack.enter_context(TestClient(app))

        yield open_browser


def a_job(client: TestClient, api_key: str, name: str) -> int:
    body = {"jobName": name, "jobHandler": "demo.noop", "cronExpr": "30 2 * * *"}
    answer = client.post("/openapi/jobs", json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert answer.status_code == 202, answer.text
    return int(answer.json()["jobId"])


def app_pk(engine: Engine, app_id: str) -> int:
    with MySqlAppTransactions(engine).reading() as apps:
        found = apps.app_record(app_id)
    assert found is not None
    return found.id


def browser(api: Browsers, engine: Engine, name: str, role: Role, apps: list[int] | None) -> Signed:
    client = api()
    return Signed(client, sign_in(client, make_operator(engine, name, role, apps)))


@pytest.fixture
def cluster(
    api: Browsers, engine: Engine, app_credentials: AppCredentials, redis_client: redis.Redis
) -> Cluster:
    register_worker(engine, "w1", now_ms=ClusterClock(redis_client).now_ms())
    other = make_app(engine, "other")
    submitter = api()
    job_a = a_job(submitter, app_credentials.api_key, "job-of-a")
    job_b = a_job(submitter, other.api_key, "job-of-b")
    scoped_to = [app_pk(engine, app_credentials.app_id)]
    return Cluster(
        app_credentials,
        other,
        job_a,
        job_b,
        browser(api, engine, "vera", Role.VIEWER, None),
        browser(api, engine, "otto", Role.OPERATOR, scoped_to),
        browser(api, engine, "ada", Role.ADMIN, None),
    )


def status_of(engine: Engine, job_id: int) -> str:
    with engine.connect() as conn:
        return str(conn.execute(sa.select(jobs.c.status).where(jobs.c.id == job_id)).scalar_one())


def trigger(client: TestClient, api_key: str, job_id: int) -> str:
    answer = client.post(
        f"/openapi/jobs/{job_id}/trigger", headers={"Authorization": f"Bearer {api_key}"}
    )
    assert answer.status_code in (200, 202), answer.text
    return str(answer.json()["executionId"])


PAGES = [
    "/console/",
    "/console/jobs",
    "/console/workers",
    "/console/apps",
    "/console/executions/stuck",
    "/console/callbacks/dead",
]


def test_every_role_reads_every_page_of_the_apps_it_reaches(
    cluster: Cluster, engine: Engine
) -> None:
    c = cluster
    for who in (c.viewer, c.scoped, c.admin):
        for path in [*PAGES, f"/console/jobs/{c.job_a}", f"/console/apps/{c.a.app_id}"]:
            answer = who.client.get(path)
            assert answer.status_code == 200, (path, answer.text)
    for who in (c.viewer, c.admin):
        assert who.client.get(f"/console/jobs/{c.job_b}").status_code == 200
        assert who.client.get(f"/console/apps/{c.b.app_id}").status_code == 200
    # Another app's job and app are, to the scoped operator, as ones that do not exist.
    assert c.scoped.client.get(f"/console/jobs/{c.job_b}").status_code == 404
    assert c.scoped.client.get(f"/console/apps/{c.b.app_id}").status_code == 404
    jobs_page = c.scoped.client.get("/console/jobs").text
    assert "job-of-a" in jobs_page and "job-of-b" not in jobs_page
    assert "job-of-b" not in c.scoped.client.get(f"/console/jobs?app={c.b.app_id}").text
    apps_page = c.scoped.client.get("/console/apps").text
    assert c.a.app_id in apps_page and c.b.app_id not in apps_page
    both = c.admin.client.get("/console/jobs").text
    assert "job-of-a" in both and "job-of-b" in both


def test_a_viewer_is_refused_every_action_with_a_page_naming_the_role_and_changes_nothing(
    cluster: Cluster, engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    c = cluster
    execution_id = str(uuid.uuid4())
    actions = [
        *(f"/console/jobs/{c.job_a}/{a}" for a in ("pause", "resume", "trigger", "cancel")),
        f"/console/jobs/{c.job_a}/backfill",
        f"/console/executions/{execution_id}/requeue",
        f"/console/executions/{execution_id}/fail",
        "/console/workers/w1/drain",
        "/console/workers/w1/undrain",
        "/console/workers/w1/stop",
        "/console/callbacks/dead/replay",
        "/console/callbacks/dead/msg_x/replay",
    ]
    for path in actions:
        status, text = c.viewer.post(path, reason="r")
        assert status == 403, (path, text)
        assert "needs the operator role" in text and "is a viewer" in text, path
    assert status_of(engine, c.job_a) == "WAITING"
    assert redis_client.get(RedisKeys(namespace.namespace).worker_drained("w1")) is None


def test_the_pages_show_each_operator_only_the_actions_it_may_take(cluster: Cluster) -> None:
    c = cluster
    pause = f'action="/console/jobs/{c.job_a}/pause"'
    viewer_job = c.viewer.client.get(f"/console/jobs/{c.job_a}").text
    assert pause not in viewer_job and "/backfill" not in viewer_job
    assert pause not in c.viewer.client.get("/console/jobs").text
    assert pause in c.scoped.client.get(f"/console/jobs/{c.job_a}").text
    assert pause in c.scoped.client.get("/console/jobs").text
    drain = 'action="/console/workers/w1/drain"'
    assert drain not in c.viewer.client.get("/console/workers").text
    assert drain not in c.scoped.client.get("/console/workers").text, "a worker serves all"
    assert drain in c.admin.client.get("/console/workers").text
    assert "viewer" in c.viewer.client.get("/console/").text


def test_an_operator_limited_to_one_app_acts_on_it_and_finds_no_other(
    cluster: Cluster, engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    c = cluster
    status, text = c.scoped.post(f"/console/jobs/{c.job_a}/pause")
    assert status == 200 and f"Job {c.job_a} paused." in text
    status, text = c.scoped.post(f"/console/jobs/{c.job_b}/pause")
    assert status == 404 and f"job {c.job_b} does not exist" in text
    assert c.scoped.post("/console/jobs/999999/pause")[0] == 404, "as for no job at all"
    assert c.scoped.post(f"/console/jobs/{c.job_b}/backfill", **{"from": "0", "to": "1"})[0] == 404
    assert (status_of(engine, c.job_a), status_of(engine, c.job_b)) == ("PAUSED", "WAITING")
    status, text = c.scoped.post("/console/workers/w1/drain")
    assert status == 403 and "reaches every app" in text and "--every-app" in text
    assert redis_client.get(RedisKeys(namespace.namespace).worker_drained("w1")) is None
    status, text = c.admin.post(f"/console/jobs/{c.job_b}/pause")
    assert status == 200 and f"Job {c.job_b} paused." in text
    status, text = c.admin.post("/console/workers/w1/drain")
    assert status == 200 and "stays up until undrained" in text


def test_stuck_runs_and_dead_callbacks_are_listed_and_acted_on_only_within_the_apps(
    cluster: Cluster, engine: Engine
) -> None:
    c = cluster
    submitter = c.admin.client
    run_a = trigger(submitter, c.a.api_key, c.job_a)
    run_b = trigger(submitter, c.b.api_key, c.job_b)
    with engine.begin() as conn:  # both overdue by far: listed as stuck
        conn.execute(executions.update().values(scheduled_at=1))
        rows = [
            NewDelivery("msg_a", run_a, c.job_a, app_pk(engine, c.a.app_id), "https://x/h", "{}"),
            NewDelivery("msg_b", run_b, c.job_b, app_pk(engine, c.b.app_id), "https://x/h", "{}"),
        ]
        MySqlDeliveryStore(conn).insert_deliveries(rows, 1)
        conn.execute(sa.text("UPDATE callback_deliveries SET status = 'DEAD'"))
    stuck = c.scoped.client.get("/console/executions/stuck?older=1m").text
    assert run_a in stuck and run_b not in stuck
    everyone = c.viewer.client.get("/console/executions/stuck?older=1m").text
    assert run_a in everyone and run_b in everyone
    dead = c.scoped.client.get("/console/callbacks/dead").text
    assert "msg_a" in dead and "msg_b" not in dead and "1 dead delivery" in dead
    assert c.scoped.client.get(f"/console/executions/{run_b}").status_code == 404
    assert c.scoped.client.get(f"/console/executions/{run_a}").status_code == 200
    status, text = c.scoped.post(f"/console/executions/{run_b}/requeue")
    assert "does not exist or has already ended" in text
    status, text = c.scoped.post(f"/console/executions/{run_a}/requeue")
    assert status == 200 and f"Execution {run_a} requeued" in text


def test_operators_of_three_apps_acting_at_once_change_only_their_own_apps_jobs(
    api: Browsers, engine: Engine, app_credentials: AppCredentials
) -> None:
    apps = [app_credentials, make_app(engine, "second"), make_app(engine, "third")]
    submitter = api()
    owned = {
        a.app_id: [a_job(submitter, a.api_key, f"{a.app_id}-{i}") for i in range(5)] for a in apps
    }
    every_job = [j for ids in owned.values() for j in ids]
    acting = {
        a.app_id: browser(api, engine, f"op-{i}", Role.OPERATOR, [app_pk(engine, a.app_id)])
        for i, a in enumerate(apps[:2])
    }
    watcher = browser(api, engine, "watcher", Role.VIEWER, None)
    answers: dict[str, Counter[int]] = {name: Counter() for name in [*acting, "watcher"]}

    def pause_all(name: str, who: Signed) -> None:
        for job_id in every_job:
            answers[name][who.post(f"/console/jobs/{job_id}/pause")[0]] += 1

    threads = [threading.Thread(target=pause_all, args=item) for item in acting.items()]
    threads.append(threading.Thread(target=pause_all, args=("watcher", watcher)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    for app_id in acting:
        assert answers[app_id] == Counter({200: 5, 404: 10})
    assert answers["watcher"] == Counter({403: 15})
    paused = {j for j in every_job if status_of(engine, j) == "PAUSED"}
    assert paused == {j for app_id in acting for j in owned[app_id]}
