"""Errors are exceptions carrying the API's problem details."""

from __future__ import annotations

import httpx
import pytest

from kairos_client import (
    ApiError,
    AuthenticationError,
    InternalServerError,
    JobSpec,
    JobStatus,
    KairosError,
    NotFoundError,
    PayloadTooLargeError,
    PermissionDeniedError,
    ResponseFormatError,
    UnprocessableEntityError,
)
from scripted import Scripted, ok, problem


def test_a_422_names_each_field_at_fault() -> None:
    refused = problem(
        422,
        "batch-rejected",
        "2 jobs are invalid",
        errors=[
            {"field": "jobs[0].cronExpr", "message": "6 fields at most"},
            {"field": "jobs[1].clientRequestId", "message": "used", "jobId": 5},
        ],
    )
    api = Scripted([refused])
    with api.client() as kairos, pytest.raises(UnprocessableEntityError) as caught:
        kairos.create_jobs([JobSpec("a", "x"), JobSpec("b", "y")])
    error = caught.value
    assert error.status == 422 and error.type == "urn:kairos:problem:batch-rejected"
    assert [e.field for e in error.problem.errors] == [
        "jobs[0].cronExpr",
        "jobs[1].clientRequestId",
    ]
    assert error.problem.errors[1].job_id == 5
    assert error.request_id == "r-1"
    assert error.problem.instance == "urn:kairos:request:r-1"
    assert "2 jobs are invalid" in str(error)
    assert isinstance(error, ApiError) and isinstance(error, KairosError)


@pytest.mark.parametrize(
    ("status", "kind", "error_class"),
    [
        (401, "unauthorized", AuthenticationError),
        (403, "app-disabled", PermissionDeniedError),
        (404, "job-not-found", NotFoundError),
        (413, "body-too-large", PayloadTooLargeError),
        (500, "internal-error", InternalServerError),
        (418, "teapot", ApiError),
    ],
)
def test_each_status_has_its_class(status: int, kind: str, error_class: type[ApiError]) -> None:
    api = Scripted([problem(status, kind, jobId=7)])
    with api.client() as kairos, pytest.raises(error_class) as caught:
        kairos.get_job(7)
    assert caught.value.problem.type == f"urn:kairos:problem:{kind}"
    assert caught.value.problem.job_id == 7


def test_extension_members_and_the_jobs_status_are_kept() -> None:
    refused = problem(409, "invalid-transition", jobId=7, jobStatus="CANCELLED", hint="x")
    api = Scripted([refused])
    with api.client() as kairos, pytest.raises(ApiError) as caught:
        kairos.resume(7)
    assert caught.value.problem.job_status is JobStatus.CANCELLED
    assert caught.value.problem.extensions == {"hint": "x"}


def test_an_error_that_is_not_a_problem_detail_is_still_an_api_error() -> None:
    api = Scripted([httpx.Response(500, text="<html>proxy down</html>")])
    with api.client() as kairos, pytest.raises(InternalServerError) as caught:
        kairos.pause(7)
    assert caught.value.problem.type == "about:blank"
    assert "proxy down" in caught.value.problem.detail


def test_a_success_whose_body_is_not_the_apis_is_a_response_format_error() -> None:
    api = Scripted([ok({"jobId": "seven", "status": "WAITING"}, 202)])
    with api.client() as kairos, pytest.raises(ResponseFormatError, match="jobId"):
        kairos.create_job(JobSpec("a", "demo.echo"))
    html = Scripted([httpx.Response(200, text="<html>login</html>")])
    with html.client() as kairos, pytest.raises(ResponseFormatError, match="without JSON"):
        kairos.get_job(7)
