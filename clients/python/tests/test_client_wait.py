"""``wait`` reads the job until it finishes, or gives up at its timeout."""

from __future__ import annotations

import pytest

from kairos_client import JobStatus, WaitTimeoutError
from scripted import Scripted, execution_json, job_json, ok


def test_wait_returns_the_job_once_it_has_finished() -> None:
    done = job_json(status="SUCCEEDED", lastExecution=execution_json())
    api = Scripted([ok(job_json(status="WAITING")), ok(job_json(status="RUNNING")), ok(done)])
    with api.client() as kairos:
        job = kairos.wait(7, timeout=60, poll_interval=0.25)
    assert job.status is JobStatus.SUCCEEDED and job.last_execution is not None
    assert len(api.requests) == 3 and api.slept == [0.25, 0.25]


@pytest.mark.parametrize("status", ["FAILED", "CANCELLED"])
def test_wait_ends_on_every_final_status(status: str) -> None:
    api = Scripted([ok(job_json(status=status))])
    with api.client() as kairos:
        assert kairos.wait(7, timeout=0).status == status


def test_wait_past_its_timeout_raises_with_the_last_job_read() -> None:
    api = Scripted([ok(job_json(status="PAUSED"))])
    with api.client() as kairos, pytest.raises(WaitTimeoutError) as caught:
        kairos.wait(7, timeout=0)
    assert caught.value.job.status is JobStatus.PAUSED
    assert "did not finish within 0 s (status PAUSED)" in str(caught.value)


def test_wait_polls_less_often_the_longer_it_waits() -> None:
    api = Scripted([ok(job_json(status="RUNNING"))] * 25 + [ok(job_json(status="SUCCEEDED"))])
    with api.client() as kairos:
        kairos.wait(7, timeout=3600, poll_interval=1)
    assert api.slept[:10] == [1] * 10 and api.slept[10:20] == [2] * 10 and api.slept[20] == 4
