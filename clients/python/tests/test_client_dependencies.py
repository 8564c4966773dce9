"""Job dependencies from the client: ``after`` sent by the API's names on create and
patch, and read back on the job and on each execution's ``waited_for``."""

from __future__ import annotations

from kairos_client import After, DependOn, ExecutionStatus, JobChanges, JobSpec
from scripted import Scripted, execution_json, job_json, ok


def test_create_sends_after_with_its_outcome() -> None:
    api = Scripted([ok({"jobId": 9, "status": "WAITING"}, 202)])
    spec = JobSpec("c", "demo.echo", after=[After(7), After(8, DependOn.FINISHED)])
    with api.client() as kairos:
        kairos.create_job(spec)
    assert api.body(0)["after"] == [
        {"jobId": 7, "on": "SUCCEEDED"},
        {"jobId": 8, "on": "FINISHED"},
    ]


def test_a_patch_may_replace_or_clear_the_parents() -> None:
    api = Scripted([ok(job_json(9)), ok(job_json(9))])
    with api.client() as kairos:
        kairos.update(9, JobChanges(after=[After(7)]))
        kairos.update(9, JobChanges(after=[]))
    assert api.body(0) == {"after": [{"jobId": 7, "on": "SUCCEEDED"}]}
    assert api.body(1) == {"after": []}


def test_the_job_and_its_runs_read_back_their_parents() -> None:
    waited = [{"jobId": 7, "executionId": "e-7", "status": "SUCCEEDED"}]
    body = job_json(
        9, after=[{"jobId": 7, "on": "FINISHED"}], lastExecution=execution_json(waitedFor=waited)
    )
    api = Scripted([ok(body), ok(job_json(10))])
    with api.client() as kairos:
        job = kairos.get_job(9)
        older = kairos.get_job(10)
    assert job.after == [After(7, DependOn.FINISHED)]
    assert job.last_execution is not None and job.last_execution.waited_for is not None
    (run,) = job.last_execution.waited_for
    assert (run.job_id, run.execution_id, run.status) == (7, "e-7", ExecutionStatus.SUCCEEDED)
    assert older.after == [] and (
        older.last_execution is None or older.last_execution.waited_for is None
    )
