"""Free-form documents (params): the text stored, its size in bytes, and what every stage
must be able to read back (depth, valid Unicode, JSON numbers)."""

from __future__ import annotations

from typing import Any

import pytest

from common.db.jobs import NewJob, _job_values
from common.documents import MAX_DEPTH, document_problem, stored_size, stored_text
from common.errors import ValidationFailedError
from services.api.schemas import JobCreate
from services.api.validation import check_params


def nested(levels: int) -> dict[str, Any]:
    """A document of ``levels`` objects inside one another (itself the first)."""
    document: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        document = {"k": document}
    return document


def _body(params: dict[str, Any]) -> JobCreate:
    return JobCreate.model_validate({"jobName": "r", "jobHandler": "demo.echo", "params": params})


def test_a_document_nested_to_the_limit_is_taken() -> None:
    assert document_problem(nested(MAX_DEPTH), "params") is None
    check_params(_body(nested(MAX_DEPTH)), 64 * 1024)


def test_one_level_deeper_is_refused_naming_where() -> None:
    problem = document_problem(nested(MAX_DEPTH + 1), "params")
    assert problem is not None
    assert problem.startswith("params.k.k")
    assert f"at most {MAX_DEPTH} levels" in problem


@pytest.mark.parametrize("levels", [33, 200, 900])
def test_check_params_refuses_deep_params_as_a_params_error(levels: int) -> None:
    with pytest.raises(ValidationFailedError) as caught:
        check_params(_body(nested(levels)), 64 * 1024)
    assert caught.value.field == "params"


def test_arrays_count_as_levels_too() -> None:
    document: dict[str, Any] = {"a": []}
    inner: list[Any] = document["a"]
    for _ in range(MAX_DEPTH - 1):
        inner.append([])
        inner = inner[0]
    assert document_problem(document, "params") is not None
    assert document_problem({"a": [[1]] * 5}, "params") is None


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"a": "x\ud800"}, "params.a"),
        ({"a": [1, {"b": "\udfff"}]}, "params.a[1].b"),
        ({"ok": 1, "\udc00": 1}, "a key of params"),
        ({"a": {"\ud83d": 1}}, "a key of params.a"),
    ],
)
def test_a_lone_surrogate_is_refused_naming_where(document: dict[str, Any], where: str) -> None:
    problem = document_problem(document, "params")
    assert problem is not None and problem.startswith(where)
    assert "lone surrogate" in problem
    problem.encode()  # the message itself is valid UTF-8


def test_check_params_refuses_a_lone_surrogate() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        check_params(_body({"a": "\ud800"}), 64 * 1024)
    assert caught.value.field == "params"


def test_a_surrogate_pair_is_one_character_and_taken() -> None:
    assert document_problem({"smile": "\U0001f600", "é": "ü"}, "params") is None


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_infinity_are_refused(number: float) -> None:
    problem = document_problem({"a": [number]}, "params")
    assert problem is not None and "NaN or Infinity" in problem


def test_the_size_is_counted_in_bytes_of_the_stored_text() -> None:
    params = {"name": "é" * 10}
    job = NewJob(1, "j", "h", params, None, 0, None, None, None)
    stored = _job_values(job, 0)["params"]
    assert stored == stored_text(params)
    assert stored_size(params) == len(stored.encode("utf-8"))


def test_non_ascii_params_at_the_limit_are_taken_and_one_byte_more_refused() -> None:
    # "é" is stored escaped, six bytes: {"p":"\u00e9..."} plus padding to the limit.
    limit = 1024
    params = {"p": "é" * 100}
    padding = limit - stored_size(params)
    at_limit = {"p": "é" * 100, "q": "x" * (padding - len(',"q":""'))}
    assert stored_size(at_limit) == limit
    check_params(_body(at_limit), limit)
    over = {**at_limit, "q": at_limit["q"] + "x"}
    with pytest.raises(ValidationFailedError) as caught:
        check_params(_body(over), limit)
    assert f"{limit + 1} bytes" in caught.value.message


def test_a_scalar_document_is_checked_as_one_value() -> None:
    assert document_problem("\ud800", "result") is not None
    assert document_problem(1.5, "result") is None
