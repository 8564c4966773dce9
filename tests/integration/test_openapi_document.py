"""/openapi.json tells the truth a generated client needs: every error status with the
one Problem schema as problem+json, enums, date-times, URIs, headers and links."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

PROBLEM = {"$ref": "#/components/schemas/Problem"}
EVERY_CALL = {"401", "403", "413", "422", "429", "500", "503"}


@pytest.fixture
def document(client: TestClient) -> dict[str, Any]:
    spec: dict[str, Any] = client.get("/openapi.json").json()
    return spec


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    ]


def test_every_error_is_a_problem_and_every_call_declares_the_common_ones(
    document: dict[str, Any],
) -> None:
    assert "HTTPValidationError" not in document["components"]["schemas"]
    for path, method, operation in operations(document):
        responses = operation["responses"]
        if path.startswith("/openapi/"):
            assert EVERY_CALL <= set(responses), (method, path)
            assert operation["security"] == [{"HTTPBearer": []}]
        for code, response in responses.items():
            assert response["headers"]["Request-Id"] == {"$ref": "#/components/headers/RequestId"}
            if code[0] in "45" and path != "/readyz":
                assert response["content"] == {"application/problem+json": {"schema": PROBLEM}}
            if code in ("429", "503"):
                assert "Retry-After" in response["headers"], (method, path, code)
            if code == "202":
                assert "Location" in response["headers"], (method, path)


def test_the_problem_schema_types_its_members(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    problem = schemas["Problem"]["properties"]
    assert problem["type"]["format"] == problem["instance"]["format"] == "uri"
    assert problem["errors"]["items"] == {"$ref": "#/components/schemas/FieldError"}
    assert problem["jobId"]["type"] == "integer"
    assert problem["jobStatus"]["$ref"] == "#/components/schemas/JobStatus"
    assert set(schemas["FieldError"]["required"]) == {"field", "message"}


def test_statuses_and_policies_are_enums_and_times_date_times(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert schemas["JobView"]["properties"]["status"] == {"$ref": "#/components/schemas/JobStatus"}
    execution = schemas["ExecutionView"]["properties"]
    assert execution["status"] == {"$ref": "#/components/schemas/ExecutionStatus"}
    assert {"type": "string", "format": "date-time"} in execution["triggerTime"]["anyOf"]
    assert execution["executionId"]["format"] == "uuid"
    policies = schemas["JobPoliciesView"]["properties"]
    assert policies["misfirePolicy"] == {"$ref": "#/components/schemas/MisfirePolicy"}
    assert policies["overlapPolicy"] == {"$ref": "#/components/schemas/OverlapPolicy"}
    assert schemas["JobStatus"]["enum"] == [
        "WAITING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "PAUSED",
        "CANCELLED",
    ]
    created = schemas["JobView"]["properties"]["createdAt"]["anyOf"]
    assert {"type": "string", "format": "date-time"} in created
    callback = schemas["JobCreate"]["properties"]["callbackUrl"]["anyOf"]
    assert {"type": "string", "format": "uri", "maxLength": 2048} in [
        {k: v for k, v in branch.items() if k != "description"} for branch in callback
    ]


def test_the_document_links_creates_to_their_job_and_triggers_to_their_execution(
    document: dict[str, Any],
) -> None:
    paths = document["paths"]
    created = paths["/openapi/jobs"]["post"]["responses"]["202"]["links"]
    assert created["getJob"] == {
        "operationId": "getJob",
        "parameters": {"jobId": "$response.body#/jobId"},
    }
    triggered = paths["/openapi/jobs/{jobId}/trigger"]["post"]["responses"]["202"]["links"]
    assert triggered["getExecution"]["operationId"] == "getExecution"
    header = next(
        p
        for p in paths["/openapi/jobs/{jobId}/trigger"]["post"]["parameters"]
        if p["in"] == "header"
    )
    assert header["name"] == "Idempotency-Key" and "anyOf" not in header["schema"]


def test_bounds_are_in_json_schema_words(document: dict[str, Any]) -> None:
    def keys(node: Any) -> set[str]:
        if isinstance(node, dict):
            return set(node) | {k for value in node.values() for k in keys(value)}
        if isinstance(node, list):
            return {k for item in node for k in keys(item)}
        return set()

    assert not keys(document["components"]["schemas"]) & {"ge", "le", "gt", "lt"}
    patch = document["components"]["schemas"]["JobPatch"]["properties"]
    assert patch["maxRetries"] == {
        "type": "integer",
        "minimum": 0,
        "maximum": 100,
        "title": "Maxretries",
    }
    assert "anyOf" not in patch["params"]  # null is refused: the document does not offer it


def test_the_priority_is_an_integer_0_to_9_that_says_what_it_does(
    document: dict[str, Any],
) -> None:
    schemas = document["components"]["schemas"]
    says = (
        "higher runs first among this app's waiting runs; it never takes another app's "
        "share; waiting runs gain priority with age"
    )
    create = schemas["JobCreate"]["properties"]["priority"]
    patch = schemas["JobPatch"]["properties"]["priority"]
    view = schemas["JobView"]["properties"]["priority"]
    for field in (create, patch, view):
        assert (field["type"], field["minimum"], field["maximum"]) == ("integer", 0, 9)
        assert says in field["description"]
    assert create["default"] == 5
    assert "default" not in patch and "anyOf" not in patch  # left out keeps it; null refused
    assert "priority" in schemas["JobView"]["required"]
    item = schemas["JobBatchCreate"]["properties"]["jobs"]["items"]
    assert item == {"$ref": "#/components/schemas/JobCreate"}
