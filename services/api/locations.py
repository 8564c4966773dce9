"""The paths of the API's resources, for ``Location`` headers."""

from __future__ import annotations


def job_location(job_id: int) -> str:
    """Where a job is read: ``/openapi/jobs/{jobId}``."""
    return f"/openapi/jobs/{job_id}"


def execution_location(execution_id: str) -> str:
    """Where an execution is read: ``/openapi/executions/{executionId}``."""
    return f"/openapi/executions/{execution_id}"


def job_executions_location(job_id: int) -> str:
    """Where a job's executions are read: ``/openapi/jobs/{jobId}/executions``."""
    return f"/openapi/jobs/{job_id}/executions"
