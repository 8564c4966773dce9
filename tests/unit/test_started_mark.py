"""Reading a worker's started key."""

from __future__ import annotations

from common.started_mark import parse_started


def test_a_key_without_an_outcome_names_its_owner() -> None:
    assert parse_started(b"w1") == ("w1", None)


def test_a_key_with_an_outcome_carries_its_json() -> None:
    assert parse_started(b'w1\n{"status": "SUCCEEDED"}') == ("w1", '{"status": "SUCCEEDED"}')


def test_no_key_is_no_owner() -> None:
    assert parse_started(None) == (None, None)
