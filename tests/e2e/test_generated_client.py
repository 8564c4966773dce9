"""A client generated from the live /openapi.json by openapi-python-client works against
the server unchanged: the generator has nothing to warn about in the document, and the
generated code sends every call right and parses every answer into its typed model,
statuses as enums, times as datetimes and errors as the one Problem model."""

from __future__ import annotations

import datetime
import hashlib
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Api, CallbackReceiver, Processes, connect_api, free_port, wait_until

GENERATOR = str(Path(sys.executable).parent / "openapi-python-client")
MYPY = str(Path(sys.executable).parent / "mypy")
PACKAGE = "kairos_generated"
FAR = "2100-01-01T00:00:00Z"
# The generator's default post-hooks format its output with ruff from PATH; the output's
# style is not what is under test, and the hooks' absence would read as a warning.
CONFIG = "post_hooks: []\n"


class Generated:
    """The generated package: its client, models and one module per operation."""

    def __init__(self, package: ModuleType) -> None:
        self.package = package

    def __getattr__(self, dotted: str) -> Any:
        """``generated.models`` or ``generated.jobs`` (an ``api`` tag) as a module."""
        if dotted in ("client", "models", "types", "errors"):
            return importlib.import_module(f"{PACKAGE}.{dotted}")
        return importlib.import_module(f"{PACKAGE}.api.{dotted}")


class Generator:
    """Generates once per document: the generator takes seconds and every test's API
    serves the same document."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, tuple[Generated, str]] = {}

    def generate(self, document: bytes) -> tuple[Generated, str]:
        """The package generated from ``document`` and the generator's output."""
        digest = hashlib.sha256(document).hexdigest()
        if digest in self.made:
            return self.made[digest]
        assert not self.made, "the API served two different documents in one run"
        work = self.root / digest[:16]
        work.mkdir()
        (work / "openapi.json").write_bytes(document)
        (work / "config.yaml").write_text(CONFIG)
        done = subprocess.run(
            [
                GENERATOR,
                "generate",
                "--path",
                str(work / "openapi.json"),
                "--config",
                str(work / "config.yaml"),
                "--meta",
                "none",
                "--output-path",
                str(work / PACKAGE),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=work,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output
        # A schema the generator half-understands shows as code that does not type-check.
        typed = subprocess.run(
            [MYPY, "--strict", "--no-incremental", PACKAGE],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=work,
        )
        assert typed.returncode == 0, typed.stdout + typed.stderr
        sys.path.insert(0, str(work))
        package = importlib.import_module(PACKAGE)
        # Operation modules are not imported by their tags' packages.
        for module in pkgutil.walk_packages(package.__path__, f"{PACKAGE}."):
            importlib.import_module(module.name)
        self.made[digest] = (Generated(package), output)
        return self.made[digest]


@pytest.fixture(scope="session")
def generator(tmp_path_factory: pytest.TempPathFactory) -> Generator:
    """The session's generator and its cache."""
    return Generator(tmp_path_factory.mktemp("generated"))


def start_stack(processes: Processes) -> Api:
    port = free_port()
    processes.start("up", "up", "--port", str(port), "--workers", "1")
    return connect_api(processes, port)


def generate_from(api: Api, generator: Generator) -> Generated:
    """Generate from the live document; the generator must not warn about it."""
    document = httpx.get(f"{api.base}/openapi.json", timeout=10)
    document.raise_for_status()
    generated, output = generator.generate(document.content)
    assert "warning" not in output.lower(), output
    return generated


def test_the_generated_client_creates_reads_and_controls_jobs(
    processes: Processes, receiver: CallbackReceiver, generator: Generator
) -> None:
    api = start_stack(processes)
    g = generate_from(api, generator)
    m = g.models
    client = g.client.AuthenticatedClient(base_url=api.base, token=api.api_key, timeout=10)
    with client:
        body = m.JobCreate(
            job_name="generated",
            job_handler="demo.echo",
            params=m.JobCreateParams.from_dict({"day": "2026-12-01"}),
            callback_url=receiver.url,
            priority=7,
        )
        accepted = g.jobs.create_job.sync(client=client, body=body, idempotency_key="gen-1")
        assert isinstance(accepted, m.JobAccepted), accepted
        assert isinstance(accepted.status, m.JobStatus)
        job_id = accepted.job_id

        def finished() -> Any:
            job = g.jobs.get_job.sync(job_id, client=client)
            assert isinstance(job, m.JobView), job
            return job.status is m.JobStatus.SUCCEEDED and job

        job = wait_until(finished, 60, what="the one-shot job to succeed")
        assert job.client_request_id == "gen-1" and job.params.to_dict() == {"day": "2026-12-01"}
        assert job.priority == 7
        assert isinstance(job.created_at, datetime.datetime) and job.created_at.tzinfo
        assert isinstance(job.last_execution, m.ExecutionView)
        assert job.last_execution.status is m.ExecutionStatus.SUCCEEDED
        assert isinstance(job.policies.misfire_policy, m.MisfirePolicy)
        assert isinstance(job.policies.overlap_policy, m.OverlapPolicy)

        runs = g.jobs.list_job_executions.sync(
            job_id, client=client, status=[m.ExecutionStatus.SUCCEEDED]
        )
        assert isinstance(runs, m.ExecutionList), runs
        (run,) = runs.executions
        assert run.execution_id == job.last_execution.execution_id
        assert run.result == {"day": "2026-12-01"}
        assert isinstance(run.ended_at, datetime.datetime) and isinstance(
            run.started_at, datetime.datetime
        )
        assert run.ended_at >= run.started_at
        read = g.executions.get_execution.sync(run.execution_id, client=client)
        assert isinstance(read, m.ExecutionView) and read.to_dict() == run.to_dict()

        def delivered() -> Any:
            page = g.callbacks.list_job_callbacks.sync(job_id, client=client)
            assert isinstance(page, m.CallbackList), page
            states = [d.state for d in page.deliveries]
            return states == [m.CallbackState.DELIVERED] and page.deliveries[0]

        delivery = wait_until(delivered, 30, what="the callback to read DELIVERED")
        assert delivery.execution_id == run.execution_id
        assert isinstance(delivery.delivered_at, datetime.datetime)
        assert [a.status_code for a in delivery.attempts] == [204]

        batch = m.JobBatchCreate(
            jobs=[
                m.JobCreate(job_name=f"gen-page-{n}", job_handler="demo.noop", trigger_at=FAR)
                for n in range(5)
            ]
        )
        created = g.jobs.create_jobs_batch.sync(client=client, body=batch)
        assert isinstance(created, m.JobBatchAccepted), created
        assert {j.status for j in created.jobs} == {m.JobStatus.WAITING}
        listed: list[int] = []
        cursor: Any = g.types.UNSET
        while True:
            page = g.jobs.list_jobs.sync(
                client=client, name_prefix="gen-page-", limit=2, cursor=cursor
            )
            assert isinstance(page, m.JobList), page
            assert len(page.jobs) <= 2
            listed += [j.job_id for j in page.jobs]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert listed == sorted((j.job_id for j in created.jobs), reverse=True)
        far = g.jobs.get_job.sync(listed[0], client=client)
        assert far.next_trigger_time == datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC)

        cron = g.jobs.create_job.sync(
            client=client,
            body=m.JobCreate(job_name="gen-yearly", job_handler="demo.noop", cron_expr="0 0 1 1 *"),
        ).job_id
        paused = g.jobs.pause_job.sync(cron, client=client)
        assert isinstance(paused, m.JobView) and paused.status is m.JobStatus.PAUSED
        resumed = g.jobs.resume_job.sync(cron, client=client)
        assert isinstance(resumed, m.JobView) and resumed.status is m.JobStatus.WAITING
        assert resumed.priority == 5
        raised = g.jobs.update_job.sync(cron, client=client, body=m.JobPatch(priority=9))
        assert isinstance(raised, m.JobView) and raised.priority == 9
        timed = m.JobPatch(max_retries=2, timeout_seconds=30)
        assert (
            g.jobs.update_job.sync(cron, client=client, body=timed).policies.timeout_seconds == 30
        )
        # An explicit None is sent as null, which clears the timeout; UNSET leaves the rest.
        cleared = g.jobs.update_job.sync(cron, client=client, body=m.JobPatch(timeout_seconds=None))
        assert isinstance(cleared, m.JobView), cleared
        assert (cleared.policies.timeout_seconds, cleared.policies.max_retries) == (None, 2)

        first = g.jobs.trigger_job.sync_detailed(cron, client=client, idempotency_key="gen-run-1")
        again = g.jobs.trigger_job.sync_detailed(cron, client=client, idempotency_key="gen-run-1")
        assert (first.status_code, again.status_code) == (202, 202)
        assert isinstance(first.parsed, m.TriggerAccepted), first.parsed
        assert isinstance(first.parsed.status, m.ExecutionStatus)
        assert again.parsed.execution_id == first.parsed.execution_id
        assert "Idempotent-Replayed" not in first.headers
        assert again.headers["Idempotent-Replayed"] == "true"
        manual = g.jobs.list_job_executions.sync(cron, client=client)
        assert [e.execution_id for e in manual.executions] == [first.parsed.execution_id]
        assert manual.executions[0].manual is True

        gone = g.jobs.delete_job.sync_detailed(listed[0], client=client)
        assert gone.status_code == 204
        assert isinstance(g.jobs.get_job.sync(listed[0], client=client), m.Problem)


def test_the_generated_client_parses_errors_as_problems(
    processes: Processes, generator: Generator
) -> None:
    api = start_stack(processes)
    g = generate_from(api, generator)
    m = g.models
    with g.client.AuthenticatedClient(base_url=api.base, token=api.api_key) as client:
        missing = g.jobs.get_job.sync_detailed(9_000_000_000, client=client)
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/problem+json"
        problem = missing.parsed
        assert isinstance(problem, m.Problem), problem
        assert problem.type_ == "urn:kairos:problem:job-not-found"
        assert problem.status == 404 and problem.job_id == 9_000_000_000
        assert problem.instance.endswith(missing.headers["Request-Id"])

        body = m.JobCreate(job_name="x", job_handler="no.such.handler")
        refused = g.jobs.create_job.sync_detailed(client=client, body=body)
        assert refused.status_code == 422
        invalid = refused.parsed
        assert isinstance(invalid, m.Problem), invalid
        assert invalid.type_ == "urn:kairos:problem:unknown-handler"
        assert [(type(e), e.field) for e in invalid.errors] == [(m.FieldError, "jobHandler")]

        cron = g.jobs.create_job.sync(
            client=client,
            body=m.JobCreate(job_name="gen-done", job_handler="demo.noop", cron_expr="0 0 1 1 *"),
        ).job_id
        assert g.jobs.cancel_job.sync(cron, client=client).status is m.JobStatus.CANCELLED
        conflict = g.jobs.resume_job.sync(cron, client=client)
        assert isinstance(conflict, m.Problem) and conflict.status == 409
        assert conflict.job_status is m.JobStatus.CANCELLED

    with g.client.AuthenticatedClient(base_url=api.base, token="not-a-key") as stranger:
        denied = g.jobs.list_jobs.sync(client=stranger)
        assert isinstance(denied, m.Problem) and denied.status == 401
