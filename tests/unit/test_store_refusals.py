"""Which database errors concern one row's data, and the 422 each becomes."""

from __future__ import annotations

import pytest
from sqlalchemy import exc

from common.store_errors import is_store_outage
from services.api.store_refusals import as_refusal, refused_row_number


class DriverError(Exception):
    """Stands for the driver's error: MySQL's code and message as its args."""


def data_error(code: int, message: str) -> exc.DataError:
    return exc.DataError("INSERT", {}, DriverError(code, message))


def test_a_value_out_of_range_names_the_request_field_and_row() -> None:
    error = data_error(1264, "Out of range value for column 'next_trigger_time' at row 3")
    refusal = as_refusal(error)
    assert refusal is not None and refusal.field == "triggerAt"
    assert "Out of range value" in refusal.message
    assert refused_row_number(error) == 3
    assert not is_store_outage(error)


def test_text_too_long_names_its_field() -> None:
    refusal = as_refusal(data_error(1406, "Data too long for column 'params' at row 1"))
    assert refusal is not None and refusal.field == "params"


def test_text_the_driver_cannot_encode_is_a_refusal_with_a_clean_message() -> None:
    try:
        "a\ud800".encode()
    except UnicodeEncodeError as e:
        error = e
    refusal = as_refusal(error)
    assert refusal is not None and refusal.field == "body"
    refusal.message.encode()  # no lone surrogate copied into the answer
    assert not is_store_outage(error)


def test_a_duplicate_key_is_no_refusal() -> None:
    error = exc.IntegrityError("INSERT", {}, DriverError(1062, "Duplicate entry 'x' for key 'uq'"))
    assert as_refusal(error) is None
    assert not is_store_outage(error)


@pytest.mark.parametrize(
    "error",
    [
        exc.OperationalError("SELECT 1", {}, DriverError(2003, "refused")),
        exc.InterfaceError("SELECT 1", {}, DriverError(0, "")),
    ],
)
def test_a_lost_store_is_an_outage_and_no_refusal(error: Exception) -> None:
    assert is_store_outage(error)
    assert as_refusal(error) is None


def test_a_lock_conflict_is_no_outage_and_no_refusal() -> None:
    # Run again in place (``common.db.retry``), never answered 422.
    error = exc.OperationalError("UPDATE", {}, DriverError(1213, "Deadlock"))
    assert not is_store_outage(error)
    assert as_refusal(error) is None


def test_a_bug_is_no_refusal() -> None:
    assert as_refusal(KeyError("x")) is None
