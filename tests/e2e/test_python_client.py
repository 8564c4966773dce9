"""The Python client (clients/python) against a running stack: every method, its
idempotency keys and errors, and a real callback verified with ``verify_webhook``."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kairos_client import (
    AsyncClient,
    AuthenticationError,
    CallbackEvent,
    CallbackState,
    Client,
    ConflictError,
    ExecutionStatus,
    JobChanges,
    JobSpec,
    JobStatus,
    NotFoundError,
    UnprocessableEntityError,
    WebhookVerificationError,
    verify_webhook,
)
from sqlalchemy.engine import Engine

from tests.books import CANCELLED_CRON, Expectation, assert_books
from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
FAR = "2100-01-01T00:00:00Z"
OTHER_SECRET = "whsec_" + base64.b64encode(b"not-the-apps-secret-0123456789ab").decode()


def start_stack(processes: Processes) -> Api:
    port = free_port()
    # Callback receivers of these tests listen on this machine.
    allowed = {"KAIROS_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8"}
    processes.start("up", "up", "--port", str(port), "--workers", "1", **allowed)
    return connect_api(processes, port)


def test_submit_wait_and_verify_the_signed_callback(
    processes: Processes, receiver: CallbackReceiver, engine: Engine
) -> None:
    api = start_stack(processes)
    spec = JobSpec("client", "demo.echo", params={"day": "2026-11-30"}, callback_url=receiver.url)
    with Client(api.base, api.api_key) as kairos:
        accepted = kairos.create_job(spec, idempotency_key="client-e2e-1")
        again = kairos.create_job(spec, idempotency_key="client-e2e-1")
        assert (again.job_id, again.replayed, accepted.replayed) == (accepted.job_id, True, False)
        job = kairos.wait(accepted.job_id, timeout=60)
        assert job.status is JobStatus.SUCCEEDED and job.client_request_id == "client-e2e-1"
        assert job.last_execution is not None
        assert job.last_execution.result == {"day": "2026-11-30"}
        runs = list(kairos.list_executions(job.job_id))
        assert [r.execution_id for r in runs] == [job.last_execution.execution_id]
        read = kairos.get_execution(runs[0].execution_id)
        assert read.status is ExecutionStatus.SUCCEEDED and read.job_id == job.job_id

    wait_until(lambda: receiver.received, 30, what="the callback")
    callback = receiver.received[0]
    payload = verify_webhook(api.signing_secret, callback.headers, callback.body.encode())
    event = CallbackEvent.from_json(payload)
    assert (event.job_id, event.execution_id) == (job.job_id, read.execution_id)
    assert event.status is ExecutionStatus.SUCCEEDED
    assert verify_webhook([OTHER_SECRET, api.signing_secret], callback.headers, callback.body)
    with pytest.raises(WebhookVerificationError, match="no webhook-signature matches"):
        verify_webhook(OTHER_SECRET, callback.headers, callback.body)
    assert_books(engine, Expectation([job.job_id]), timeout=30)


def test_every_control_call_listing_and_error_through_the_client(
    processes: Processes, engine: Engine
) -> None:
    api = start_stack(processes)
    with Client(api.base, api.api_key) as kairos:
        specs = [JobSpec(f"page-{n}", "demo.noop", trigger_at=FAR) for n in range(5)]
        batch = kairos.create_jobs(specs, idempotency_key="client-batch-1")
        replay = kairos.create_jobs(specs, idempotency_key="client-batch-1")
        assert replay.replayed and replay.jobs == batch.jobs
        listed = list(kairos.list_jobs(name_prefix="page-", page_size=2))
        assert [j.job_id for j in listed] == sorted((j.job_id for j in batch.jobs), reverse=True)

        spec = JobSpec("yearly", "demo.echo", cron_expr="0 0 1 1 *", priority=3)
        cron = kairos.create_job(spec).job_id
        shown = kairos.get_job(cron, preview=2)
        assert shown.next_trigger_times is not None and shown.priority == 3
        assert kairos.pause(cron).status is JobStatus.PAUSED
        assert kairos.resume(cron).status is JobStatus.WAITING
        changes = JobChanges(max_retries=2, timeout_seconds=None, priority=8)
        changed = kairos.update(cron, changes)
        assert changed.policies is not None and changed.policies.max_retries == 2
        assert changed.priority == 8
        first = kairos.trigger(cron, idempotency_key="client-run-1")
        repeat = kairos.trigger(cron, idempotency_key="client-run-1")
        assert repeat.execution_id == first.execution_id and repeat.replayed
        wait_until(
            lambda: kairos.get_execution(first.execution_id).status is ExecutionStatus.SUCCEEDED,
            30,
            what="the manual run",
        )
        assert kairos.cancel(cron).status is JobStatus.CANCELLED
        with pytest.raises(ConflictError) as refused:
            kairos.resume(cron)
        assert refused.value.type == "urn:kairos:problem:invalid-transition"
        assert refused.value.problem.job_status is JobStatus.CANCELLED

        kairos.delete(batch.jobs[0].job_id)
        with pytest.raises(NotFoundError) as gone:
            kairos.get_job(batch.jobs[0].job_id)
        assert gone.value.type == "urn:kairos:problem:job-not-found"
        assert gone.value.request_id and gone.value.problem.job_id == batch.jobs[0].job_id
        with pytest.raises(UnprocessableEntityError) as invalid:
            kairos.create_job(JobSpec("x", "no.such.handler"))
        assert invalid.value.type == "urn:kairos:problem:unknown-handler"
        assert [e.field for e in invalid.value.problem.errors] == ["jobHandler"]

    with Client(api.base, "not-a-key") as stranger, pytest.raises(AuthenticationError):
        stranger.get_job(cron)
    waiting = [j.job_id for j in batch.jobs[1:]]
    assert_books(
        engine,
        Expectation(waiting, {"WAITING"}),
        Expectation([cron], {"CANCELLED"}, CANCELLED_CRON),
        timeout=30,
    )


def test_the_async_client_submits_waits_and_reads(processes: Processes) -> None:
    api = start_stack(processes)

    async def scenario() -> None:
        async with AsyncClient(api.base, api.api_key) as kairos:
            accepted = await kairos.create_job(JobSpec("async", "demo.echo", params={"n": 1}))
            job = await kairos.wait(accepted.job_id, timeout=60)
            assert job.status is JobStatus.SUCCEEDED
            assert job.client_request_id, "the key the client made is the job's key"
            runs = [r async for r in kairos.list_executions(job.job_id, status=["SUCCEEDED"])]
            assert len(runs) == 1 and runs[0].result == {"n": 1}
            assert [j.job_id async for j in kairos.list_jobs(name_prefix="async")] == [job.job_id]

    asyncio.run(scenario())


def test_the_callbacks_of_a_job_as_the_app_sees_them(processes: Processes) -> None:
    api = start_stack(processes)
    receiver = CallbackReceiver(statuses=[500])  # the first attempt fails, the retry lands
    try:
        with Client(api.base, api.api_key) as kairos:
            spec = JobSpec("seen", "demo.noop", callback_url=receiver.url)
            job = kairos.wait(kairos.create_job(spec).job_id, timeout=60)
            # The server serves this route: a not-found answer is a failure, not a skip.
            kairos.callbacks(job.job_id)

            def delivered() -> bool:
                deliveries = kairos.callbacks(job.job_id)
                return len(deliveries) == 1 and deliveries[0].state is CallbackState.DELIVERED

            wait_until(delivered, 30, what="the delivery to read DELIVERED")
            (delivery,) = kairos.callbacks(job.job_id)
            kairos.replay_callback(delivery.delivery_id)
            wait_until(lambda: len(receiver.received) == 3, 30, what="the replayed callback")
            wait_until(delivered, 30, what="the replay to read DELIVERED")
            (replayed,) = kairos.callbacks(job.job_id)
    finally:
        receiver.close()
    assert job.last_execution is not None
    assert delivery.execution_id == job.last_execution.execution_id
    assert delivery.next_attempt_at is None
    assert [a.status_code for a in delivery.attempts] == [500, 204]
    assert all(a.at is not None for a in delivery.attempts)
    assert [a.status_code for a in replayed.attempts] == [500, 204, 204]
    ids = {r.headers["webhook-id"] for r in receiver.received}
    assert ids == {delivery.delivery_id}, "a replay keeps the webhook-id"


def readme_example(name: str) -> str:
    """The code block of the README's "Python client" section whose first line names it."""
    section = (ROOT / "README.md").read_text().split("## Python client\n", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    found: str = next(b for b in blocks if b.startswith(f"# {name}\n"))
    return found


def test_the_readme_example_submits_waits_and_verifies_its_callback(
    processes: Processes, tmp_path: Path
) -> None:
    api = start_stack(processes)
    port = free_port()
    receiver_code = readme_example("receiver.py").replace("8080", str(port))
    submit_code = readme_example("submit.py").replace("8080", str(port))
    submit_code = submit_code.replace("http://127.0.0.1:8000", api.base)
    (tmp_path / "receiver.py").write_text(receiver_code)
    (tmp_path / "submit.py").write_text(submit_code)
    env = {"KAIROS_API_KEY": api.api_key, "KAIROS_SIGNING_SECRETS": api.signing_secret}
    env = {**os.environ, **env}
    log = tmp_path / "receiver.log"
    with log.open("wb") as out:
        receiver = subprocess.Popen(
            [sys.executable, "-u", str(tmp_path / "receiver.py")],
            env=env,
            stdout=out,
            stderr=subprocess.DEVNULL,
        )
    try:
        submitted = subprocess.run(
            [sys.executable, str(tmp_path / "submit.py")],
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout == "SUCCEEDED {'day': '2026-11-30'}\n"
        printed = wait_until(
            lambda: (text := log.read_text()).endswith("\n") and text,
            30,
            what="the receiver to print the event",
        )
        job_id, _, status, result = printed.split(" ", 3)
        assert status == "SUCCEEDED"
        # Standard Webhooks' envelope carries the result; the flat body before it did not.
        assert result in ("{'day': '2026-11-30'}\n", "None\n")
        assert api.job(int(job_id))["status"] == "SUCCEEDED"
    finally:
        receiver.terminate()
        receiver.wait(timeout=10)
