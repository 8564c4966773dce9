"""The alert gate: one alert per window per key, the rest counted and told, streaks."""

from __future__ import annotations

import pytest

from common.alerts.gate import AlertState, admit, counted_failure, summarised, summary_due
from common.alerts.kinds import AlertKind, AlertRuleInvalid, parse_kinds
from common.alerts.rules import NewAlertRule

MINUTE = 60_000


def test_the_first_event_sends_and_the_rest_of_the_window_is_counted() -> None:
    state, sent = admit(AlertState(), 1_000, 10 * MINUTE)
    assert sent is not None and sent.suppressed == 0
    for n in range(1, 3_600):
        state, sent = admit(state, 1_000 + n * 100, 10 * MINUTE)
        assert sent is None
    assert state.suppressed == 3_599
    assert state.suppressed_since == 1_100


def test_the_first_event_after_the_window_sends_with_the_count_kept_back() -> None:
    state, _ = admit(AlertState(), 0, MINUTE)
    state, _ = admit(state, 10, MINUTE)
    state, _ = admit(state, 20, MINUTE)
    state, sent = admit(state, MINUTE, MINUTE)
    assert sent is not None
    assert (sent.suppressed, sent.suppressed_since) == (2, 10)
    assert (state.suppressed, state.suppressed_since, state.last_sent_at) == (0, None, MINUTE)


def test_an_every_second_failure_for_a_day_sends_one_alert_per_window() -> None:
    state, sends, told = AlertState(), 0, 0
    for second in range(86_400):
        state, sent = admit(state, second * 1_000, 10 * MINUTE)
        if sent is not None:
            sends += 1
            told += sent.suppressed
    assert sends == 144
    # Every failure is either an alert or counted in the next one, or still kept back.
    assert sends + told + state.suppressed == 86_400


def test_a_summary_is_due_once_the_window_is_over_with_events_kept_back() -> None:
    state, _ = admit(AlertState(), 0, MINUTE)
    assert not summary_due(state, 2 * MINUTE, MINUTE)
    state, _ = admit(state, 5, MINUTE)
    assert not summary_due(state, MINUTE - 1, MINUTE)
    assert summary_due(state, MINUTE, MINUTE)
    state, sent = summarised(state, MINUTE)
    assert sent.suppressed == 1
    assert not summary_due(state, 10 * MINUTE, MINUTE)


def test_a_streak_is_reached_on_the_nth_failure_and_stays_reached() -> None:
    state = AlertState()
    reached = []
    for _ in range(5):
        state, hit = counted_failure(state, 3)
        reached.append(hit)
    assert reached == [False, False, True, True, True]


def test_kinds_are_read_in_any_case_and_order_and_unknown_ones_refused() -> None:
    assert parse_kinds("lost, failed,LOST") == (AlertKind.FAILED, AlertKind.LOST)
    assert AlertKind.TIMED_OUT.event_type == "alert.timed_out"
    with pytest.raises(AlertRuleInvalid, match="unknown alert kind BROKEN"):
        parse_kinds("FAILED,BROKEN")
    with pytest.raises(AlertRuleInvalid, match="at least one"):
        parse_kinds(" , ")


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        (NewAlertRule("ftp://x", (AlertKind.FAILED,)), "http"),
        (NewAlertRule("https://x", (AlertKind.FAILED,), streak=0), "--streak"),
        (NewAlertRule("https://x", (AlertKind.FAILED,), every_seconds=0), "--every"),
        (NewAlertRule("https://x", (AlertKind.WORKER_GONE,), app_id="app_1"), "without --app"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_saying_what_to_change(
    rule: NewAlertRule, said: str
) -> None:
    with pytest.raises(AlertRuleInvalid, match=said):
        rule.check()
