"""A body that is not JSON gets a 422 that says where the reader stopped and what it
expected there, not a bare "JSON decode error" on a field named by a character index."""

from __future__ import annotations

from fastapi.testclient import TestClient

BODY = '{"jobName": "report",\n "jobHandler": demo.echo}'


def test_malformed_json_names_the_body_its_line_column_and_what_was_expected(
    client: TestClient,
) -> None:
    answer = client.post(
        "/openapi/jobs", content=BODY, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    message = "the body is not valid JSON: Expecting value at line 2, column 16 (character 38)"
    assert problem["errors"] == [{"field": "body", "message": message}]
    assert problem["detail"] == f"body: {message}"
