"""Apps through the CLI: list them, rotate their API key and signing secret, and the
running services honour the change."""

from __future__ import annotations

import json
import subprocess
import time

import httpx
from sqlalchemy.engine import Engine

from services.notifier.signing import verify
from tests.books import Expectation, assert_books
from tests.e2e.harness import (
    KAIROS,
    CallbackReceiver,
    Processes,
    connect_api,
    free_port,
    wait_healthy,
    wait_until,
)


def status_with(base: str, api_key: str) -> int:
    """The status of an authenticated read of a job that does not exist: 404, or 401."""
    headers = {"Authorization": f"Bearer {api_key}"}
    return httpx.get(f"{base}/openapi/jobs/999999", headers=headers, timeout=10).status_code


def test_a_rotated_key_overlaps_the_old_one_or_replaces_it_at_once(processes: Processes) -> None:
    port = free_port()
    processes.start("api", "api", "--port", str(port), KAIROS_AUTH_CACHE_SECONDS="0.2")
    base = wait_healthy(port)
    created = json.loads(processes.run("app", "create", "billing", "--handlers", "*"))
    old_key = created["apiKey"]
    assert status_with(base, old_key) == 404
    listed = processes.run("app", "list")
    assert created["appId"] in listed and "billing" in listed
    assert "kairos_" not in listed and "whsec_" not in listed  # no secrets shown
    rotated = json.loads(processes.run("app", "rotate-key", created["appId"]))
    assert rotated["appId"] == created["appId"] and rotated["apiKey"] != old_key
    assert status_with(base, rotated["apiKey"]) == 404
    assert status_with(base, old_key) == 404  # the default overlap: both work for 24 h
    at_once = json.loads(
        processes.run("app", "rotate-key", created["appId"], "--overlap-hours", "0")
    )
    assert status_with(base, at_once["apiKey"]) == 404
    olds = (old_key, rotated["apiKey"])
    wait_until(
        lambda: all(status_with(base, old) == 401 for old in olds),
        10,
        what="the old keys to stop working",
    )


def kairos(processes: Processes, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a ``kairos`` command that may fail; its exit code and output."""
    return subprocess.run(
        [KAIROS, *args], env=processes.env, capture_output=True, text=True, timeout=60
    )


def test_rotating_the_key_or_secret_of_an_unknown_app_says_so(processes: Processes) -> None:
    for command in ("rotate-key", "rotate-secret"):
        done = kairos(processes, "app", command, "app_nope")
        assert done.returncode == 2
        assert done.stdout == ""
        assert "no app 'app_nope'; `kairos app list` shows the apps" in done.stderr


def test_after_a_secret_rotation_callbacks_verify_with_the_new_and_the_old_secret(
    processes: Processes, receiver: CallbackReceiver, engine: Engine
) -> None:
    port = free_port()
    processes.start("up", "up", "--port", str(port), KAIROS_SECRET_CACHE_SECONDS="0.5")
    api = connect_api(processes, port)
    app_id = processes.run("app", "list").splitlines()[-1].split()[0]  # the app just made
    job_ids: list[int] = []

    def callback_signatures() -> tuple[tuple[str, int, str], str]:
        """Run a job with a callback; its signed fields and its signature header."""
        body = {"jobName": "r", "jobHandler": "demo.noop", "callbackUrl": receiver.url}
        created = api.post_job(body)
        assert created.status_code == 202
        job_ids.append(created.json()["jobId"])
        seen = len(receiver.received)
        wait_until(lambda: len(receiver.received) > seen, 30, what="the callback")
        callback = receiver.received[-1]
        headers = {k.lower(): v for k, v in callback.headers.items()}
        signed = (headers["webhook-id"], int(headers["webhook-timestamp"]), callback.body)
        return signed, headers["webhook-signature"]

    signed, header = callback_signatures()  # the notifier now holds the old secret
    assert verify(api.signing_secret, *signed, header) and " " not in header
    rotated = json.loads(processes.run("app", "rotate-secret", app_id, "--overlap-hours", "1"))
    assert rotated["appId"] == app_id and rotated["previousSecretSignsUntil"]
    time.sleep(0.6)  # past the notifier's secret cache
    signed, header = callback_signatures()
    assert verify(rotated["signingSecret"], *signed, header)
    assert verify(api.signing_secret, *signed, header)
    again = kairos(processes, "app", "rotate-secret", app_id)
    assert again.returncode == 2 and "still signs with its previous secret" in again.stderr
    assert_books(engine, Expectation(job_ids, execution_statuses={"SUCCEEDED"}), timeout=30)


def test_an_operator_restricts_an_apps_handlers_and_the_running_api_follows(
    processes: Processes,
) -> None:
    port = free_port()
    processes.start("api", "api", "--port", str(port), KAIROS_AUTH_CACHE_SECONDS="0.2")
    processes.start("worker", "worker", "--id", "w1")  # registers the demo handlers
    api = connect_api(processes, port)  # granted '*': a job of demo.noop is accepted
    app_id = processes.run("app", "list").splitlines()[-1].split()[0]
    shown = json.loads(processes.run("app", "handlers", app_id))
    assert shown == {"appId": app_id, "handlerPatterns": ["*"]}

    done = kairos(processes, "app", "handlers", app_id, "--allow", "demo.e*", "--allow", "x.?")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["handlerPatterns"] == ["demo.e*", "x.?"]
    assert "KAIROS_AUTH_CACHE_SECONDS" in done.stderr
    assert "1 live jobs of this app name handlers outside these patterns" in done.stderr
    listed = processes.run("app", "list").splitlines()[-1].split()
    assert listed[0] == app_id and listed[2:4] == ["enabled", "demo.e*,x.?"]
    body = {"jobName": "r", "jobHandler": "demo.noop", "triggerAt": "2100-01-01T00:00:00Z"}
    refused = wait_until(
        lambda: (r := api.post_job(body)).status_code == 422 and r,
        10,
        what="the API to take the restriction",
    )
    assert refused.json()["errors"][0]["field"] == "jobHandler"
    assert f"`kairos app handlers {app_id} --allow PATTERN`" in refused.json()["detail"]
    assert api.post_job({**body, "jobHandler": "demo.echo"}).status_code == 202

    bad = kairos(processes, "app", "handlers", app_id, "--allow", "demo.[ab]")
    assert bad.returncode == 2 and bad.stdout == ""
    assert "--allow: 'demo.[ab]' holds '['" in bad.stderr
    assert json.loads(processes.run("app", "handlers", app_id))["handlerPatterns"] == [
        "demo.e*",
        "x.?",
    ]
    lifted = json.loads(processes.run("app", "handlers", app_id, "--all"))
    assert lifted["handlerPatterns"] == ["*"]
    wait_until(lambda: api.post_job(body).status_code == 202, 10, what="the lift to apply")
