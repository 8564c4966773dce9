"""The services run with store users that hold only what they need: a MySQL user with
SELECT, INSERT, UPDATE and DELETE on the namespace's database, and the RabbitMQ user
`kairos migrate` creates (tag management, rights on the namespace's vhost only).
What only an owner may do (`kairos migrate`) fails for them, in one line."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.config import StoreSettings
from common.db.engine import server_url
from common.vhost import ensure_vhost, management_api
from tests.books import Expectation, assert_books
from tests.e2e.harness import KAIROS, CallbackReceiver, Processes, connect_api, free_port


@pytest.fixture
def runtime_user(namespace: StoreSettings) -> Iterator[tuple[str, str]]:
    """A MySQL user with row rights only on the namespace's database, and the namespace's
    vhost prepared with a RabbitMQ user of its own; both removed afterwards."""
    user, password = f"k{secrets.token_hex(5)}", secrets.token_hex(12)
    root = sa.create_engine(server_url(namespace), poolclass=sa.NullPool)
    with root.begin() as conn:
        for host in ("%", "localhost"):
            conn.execute(sa.text(f"CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'"))
            conn.execute(
                sa.text(
                    f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{namespace.namespace}`.* "
                    f"TO '{user}'@'{host}'"
                )
            )
    amqp = f"amqp://{user}:{password}@127.0.0.1:5672"
    ensure_vhost(namespace.model_copy(update={"amqp_url": amqp}))
    yield user, password
    with root.begin() as conn:
        for host in ("%", "localhost"):
            conn.execute(sa.text(f"DROP USER IF EXISTS '{user}'@'{host}'"))
    root.dispose()
    base, auth = management_api(namespace)
    httpx.delete(f"{base}/api/users/{quote(user)}", auth=auth, timeout=10)


def test_the_services_run_with_least_privileged_users(
    processes: Processes,
    engine: Engine,
    runtime_user: tuple[str, str],
    receiver: CallbackReceiver,
) -> None:
    user, password = runtime_user
    processes.env.update(
        {
            "KAIROS_DATABASE_URL": f"mysql+pymysql://{user}:{password}@127.0.0.1:3306",
            "KAIROS_AMQP_URL": f"amqp://{user}:{password}@127.0.0.1:5672",
            "KAIROS_AMQP_MANAGEMENT_URL": f"http://{user}:{password}@127.0.0.1:15672",
        }
    )
    port = free_port()
    processes.start("api", "api", "--port", str(port))
    processes.start("dispatcher", "dispatcher")
    processes.start("worker", "worker", "--id", "w1")
    processes.start("notifier", "notifier")
    api = connect_api(processes, port)
    body = {"jobName": "least", "jobHandler": "demo.echo", "callbackUrl": receiver.url}
    job_id = api.post_job(body).json()["jobId"]
    assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    assert_books(
        engine,
        Expectation([job_id], execution_statuses={"SUCCEEDED"}, callbacks="delivered"),
        timeout=30,
    )

    stats = json.loads(processes.run("stats", "-o", "json"))
    assert stats["queueError"] is None, "the management tag reads the vhost's queues"
    assert "kairos.worker.w1" in {q["name"] for q in stats["queues"]}
    workers = json.loads(processes.run("workers", "-o", "json"))["workers"]
    assert [w["workerId"] for w in workers] == ["w1"]

    refused = subprocess.run(
        [KAIROS, "migrate"], env=processes.env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0
    assert refused.stderr.startswith("kairos: ") and "Traceback" not in refused.stderr
    assert password not in refused.stderr
    assert "refused access" in refused.stderr and "1044" in refused.stderr
