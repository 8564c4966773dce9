"""Reading a worker's started key."""

from __future__ import annotations

from common.started_marks import OPERATOR, RECONCILER, RunMark, RunState, parse_started, run_state


def test_a_key_without_an_outcome_names_its_owner() -> None:
    assert parse_started(b"w1") == ("w1", None)


def test_a_key_with_an_outcome_carries_its_json() -> None:
    assert parse_started(b'w1\n{"status": "SUCCEEDED"}') == ("w1", '{"status": "SUCCEEDED"}')


def test_no_key_is_no_owner() -> None:
    assert parse_started(None) == (None, None)


def test_each_key_has_one_run_state() -> None:
    assert run_state(None, None) is RunState.NEVER_STARTED
    assert run_state("w1", None) is RunState.RUNNING
    assert run_state("w1", "{}") is RunState.ENDED_UNRECORDED
    assert run_state(RECONCILER, None) is RunState.SETTLING
    assert run_state(OPERATOR, None) is RunState.SETTLING


def test_a_negative_pttl_is_no_expiry() -> None:
    assert RunMark.parse(b"w1", -1) == RunMark("w1")
    assert RunMark.parse(None, -2) == RunMark()
    assert RunMark.parse(b"w1", 5_000) == RunMark("w1", None, 5_000)
