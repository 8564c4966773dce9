"""Integer fields of a job: whole numbers within what their INT columns hold; ``true``
and ``false`` are not numbers."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from annotated_types import Le
from sqlalchemy import Integer

from common.db.schema import jobs
from services.api.schemas import JobCreate, JobPatch

INTEGER_FIELDS = {
    "fixedRateSeconds": "fixed_rate_seconds",
    "misfireThresholdSeconds": "misfire_threshold_seconds",
    "catchUpWindowSeconds": "catch_up_window_seconds",
    "maxRetries": "max_retries",
    "retryBackoffSeconds": "retry_backoff_seconds",
    "retryBackoffMaxSeconds": "retry_backoff_max_seconds",
    "timeoutSeconds": "timeout_seconds",
}
INT_MAX = 2**31 - 1

BASE: dict[type[pydantic.BaseModel], dict[str, Any]] = {
    JobCreate: {"jobName": "r", "jobHandler": "demo.echo"},
    JobPatch: {},
}


def _errors(model: type[pydantic.BaseModel], field: str, value: Any) -> list[Any]:
    raw = json.dumps({**BASE[model], field: value})
    with pytest.raises(pydantic.ValidationError) as caught:
        model.model_validate_json(raw)
    return [error["loc"] for error in caught.value.errors()]


@pytest.mark.parametrize("model", [JobCreate, JobPatch])
@pytest.mark.parametrize("field", sorted(INTEGER_FIELDS))
@pytest.mark.parametrize("flag", [True, False])
def test_true_or_false_is_not_a_number(
    model: type[pydantic.BaseModel], field: str, flag: bool
) -> None:
    assert _errors(model, field, flag) == [(field,)]


@pytest.mark.parametrize("model", [JobCreate, JobPatch])
@pytest.mark.parametrize("field", sorted(INTEGER_FIELDS))
@pytest.mark.parametrize("value", [1.5, -1, 10**20, "ten"])
def test_fractions_out_of_range_and_text_are_refused(
    model: type[pydantic.BaseModel], field: str, value: Any
) -> None:
    assert _errors(model, field, value) == [(field,)]


@pytest.mark.parametrize("model", [JobCreate, JobPatch])
@pytest.mark.parametrize("field", sorted(INTEGER_FIELDS))
def test_every_bound_fits_its_int_column(model: type[pydantic.BaseModel], field: str) -> None:
    column = jobs.c[INTEGER_FIELDS[field]]
    assert isinstance(column.type, Integer)
    bounds = [m.le for m in model.model_fields[field].metadata if isinstance(m, Le)]
    assert bounds, f"{field} has no upper bound"
    assert isinstance(bounds[0], int) and bounds[0] <= INT_MAX


def test_a_whole_number_written_as_a_float_is_taken() -> None:
    body = JobCreate.model_validate_json('{"jobName": "r", "jobHandler": "x", "maxRetries": 3.0}')
    assert body.maxRetries == 3
