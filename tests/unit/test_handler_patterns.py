"""Handler patterns: which handlers an app may name, glob-style, and what a pattern may be."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import ValidationFailedError
from common.handler_patterns import (
    EVERY_HANDLER,
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    NO_HANDLER,
    HandlerPatterns,
    checked_patterns,
    handler_admitted,
    pattern_problem,
)


@pytest.mark.parametrize(
    ("pattern", "handler", "allowed"),
    [
        ("report.*", "report.generate", True),
        ("report.*", "report.", True),
        ("report.*", "report", False),
        ("report.*", "billing.report.x", False),
        ("report.*", "REPORT.generate", False),  # case counts, on every platform
        ("billing.export", "billing.export", True),
        ("billing.export", "billing.exports", False),
        ("billing.export", "billing_export", False),  # '.' is no wildcard
        ("report.v?", "report.v2", True),
        ("report.v?", "report.v10", False),
        ("*", "anything.at:all", True),
        ("*.sync", "crm.contacts.sync", True),
    ],
)
def test_a_pattern_matches_as_fnmatchcase_does(pattern: str, handler: str, allowed: bool) -> None:
    assert HandlerPatterns((pattern,)).allows(handler) is allowed


def test_any_pattern_of_several_admits_a_handler() -> None:
    patterns = HandlerPatterns(("report.*", "billing.export"))
    assert patterns.allows("report.daily") and patterns.allows("billing.export")
    assert not patterns.allows("billing.import")


def test_every_handler_is_a_pattern_and_no_list_admits_none() -> None:
    assert EVERY_HANDLER.allows("anything") and EVERY_HANDLER.patterns == ("*",)
    assert not HandlerPatterns(()).allows("anything") and NO_HANDLER == HandlerPatterns()
    assert not NO_HANDLER.granted and EVERY_HANDLER.granted


def test_patterns_round_trip_through_their_stored_text() -> None:
    patterns = HandlerPatterns(("report.*", "billing.export"))
    assert HandlerPatterns.from_stored(patterns.stored()) == patterns
    assert EVERY_HANDLER.stored() == '["*"]'
    # NULL is no grant: access is given explicitly, never assumed.
    assert HandlerPatterns.from_stored(None) == NO_HANDLER
    assert HandlerPatterns.from_stored("[]") == NO_HANDLER


@pytest.mark.parametrize(
    ("stored", "handler", "admitted"),
    [
        ('["report.*"]', "report.daily", True),
        ('["report.*"]', "billing.export", False),
        ('["*"]', "billing.export", True),
        ("[]", "report.daily", False),
        (None, "report.daily", False),
        ("not json", "report.daily", False),
    ],
)
def test_handler_admitted_reads_the_stored_patterns(
    stored: str | None, handler: str, admitted: bool
) -> None:
    assert handler_admitted(stored, handler) is admitted


@pytest.mark.parametrize("stored", ["not json", "{}", '["a", 1]', '"report.*"'])
def test_stored_text_that_cannot_be_read_admits_nothing(stored: str) -> None:
    # A restriction that cannot be read must not turn into no restriction.
    assert HandlerPatterns.from_stored(stored) == HandlerPatterns(())


def test_patterns_are_shown_quoted_and_clipped() -> None:
    assert EVERY_HANDLER.shown() == "'*'"
    assert NO_HANDLER.shown() == "none"
    assert HandlerPatterns(("a.*", "b")).shown() == "'a.*', 'b'"
    many = HandlerPatterns(tuple(f"h{i}" for i in range(15)))
    assert many.shown().endswith("'h9' and 5 more")


@pytest.mark.parametrize(
    "pattern",
    ["report.*", "billing.export", "a", "x?", "*", "crm:contacts/sync-v2_x", "A" * 200],
)
def test_sane_patterns_are_taken(pattern: str) -> None:
    assert pattern_problem(pattern) is None


@pytest.mark.parametrize(
    ("pattern", "says"),
    [
        ("", "is empty"),
        ("a" * (MAX_PATTERN_LENGTH + 1), f"at most {MAX_PATTERN_LENGTH}"),
        ("report [x]", "' '"),
        ("report.[ab]", "'['"),  # fnmatch's character classes are not offered
        ("report.!x", "'!'"),
        ("rapport.été", "'é'"),
        ("a\nb", "'\\n'"),
        ("a\\*", "'\\\\'"),
    ],
)
def test_a_bad_pattern_is_refused_with_the_reason(pattern: str, says: str) -> None:
    problem = pattern_problem(pattern)
    assert problem is not None and says in problem


def test_checked_patterns_name_the_flag_and_the_bad_pattern() -> None:
    with pytest.raises(ValidationFailedError) as caught:
        checked_patterns(["report.*", "bad pattern"], "--allow")
    assert caught.value.field == "--allow"
    assert "'bad pattern'" in str(caught.value) and str(caught.value).startswith("--allow: ")


def test_checked_patterns_drop_repeats_and_keep_the_order() -> None:
    assert checked_patterns(["b.*", "a", "b.*"], "--allow") == ("b.*", "a")


def test_checked_patterns_refuse_none_or_too_many() -> None:
    with pytest.raises(ValidationFailedError, match="at least one"):
        checked_patterns([], "--allow")
    with pytest.raises(ValidationFailedError, match=f"at most {MAX_PATTERNS}"):
        checked_patterns([f"h{i}" for i in range(MAX_PATTERNS + 1)], "--allow")
    assert len(checked_patterns([f"h{i}" for i in range(MAX_PATTERNS)], "--allow")) == 50


_PATTERN_TEXT = st.text(alphabet="ab.*?-", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PATTERN_TEXT, min_size=1, max_size=4), st.text(alphabet="ab.-\n", max_size=8))
def test_allows_agrees_with_fnmatchcase_on_any_pattern_and_name(
    patterns: list[str], handler: str
) -> None:
    expected = any(fnmatch.fnmatchcase(handler, p) for p in patterns)
    assert HandlerPatterns(tuple(patterns)).allows(handler) is expected
