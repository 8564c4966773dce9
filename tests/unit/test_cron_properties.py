"""Property tests of cron next times: random accepted expressions, zones with odd
offset changes, starts around those changes; compared with a slow oracle.

Each computation must give the oracle's fire (the expression's wall time, or README's
shift across a change), strictly later than the last, skipping none the rules fire,
and do a bounded count of work (never a bound on time: nothing here is timed).
Examples are few and derandomized, so the unit tier stays fast and repeatable.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.cron import LAST_MS, CronWork, next_trigger_ms, validate_cron
from common.errors import ValidationFailedError
from common.schedule import Schedule
from tests.unit.cron_oracle import Cron, crons, fires, instants

ZONES = (
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",  # 30-minute changes
    "Asia/Kolkata",  # +05:30, no daylight saving
    "America/Santiago",  # southern hemisphere, changes at midnight
    "Australia/Sydney",
)
FIRES = 12
# One computation walks a few stretches of constant offset (common.cron.zone): it
# moves to an offset change or jumps close to a far wall time, and a change is
# followed by no other within 27 hours; 60,000 random computations needed at most 4.
# Each round looks up at most 3 offsets and bisects at most twice over 27 hours (17
# lookups each), and searches the calendar at most twice, each over at most 41 years
# of one month (a 5th Monday in February comes up to 40 years apart).
MOST_ROUNDS = 6
MOST_PROBES = MOST_ROUNDS * (3 + 2 * 17)
MOST_MONTHS = MOST_ROUNDS * 2 * 41

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@cache
def offset_changes(name: str) -> tuple[int, ...]:
    """The zone's offset changes (epoch ms) from 2024 to 2030, found by daily probes."""
    tz = ZoneInfo(name)

    def offset(second: int) -> timedelta | None:
        return datetime.fromtimestamp(second, tz).utcoffset()

    first = int(datetime(2024, 1, 1, tzinfo=UTC).timestamp())
    changes = []
    for day in range(first, first + 7 * 365 * 86_400, 86_400):
        low, high = day, day + 86_400
        if offset(low) == offset(high):
            continue
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if offset(middle) == offset(low) else (low, middle)
        changes.append(high * 1000)
    return tuple(changes)


def spread(name: str) -> timedelta:
    """The most the zone's offset changes by: an hour, or nothing for a fixed offset."""
    return timedelta(hours=1) if offset_changes(name) else timedelta(0)


@st.composite
def zone_and_start(draw: st.DrawFn) -> tuple[str, int]:
    """A zone and an instant: mostly near one of its changes, sometimes anywhere."""
    name = draw(st.sampled_from(ZONES))
    changes = offset_changes(name)
    if not changes or draw(st.integers(0, 5)) == 0:
        return name, draw(st.integers(0, 4_102_444_800_000))  # 1970-2100
    change = draw(st.sampled_from(changes))
    reach = draw(st.sampled_from([3_000, 120_000, 3 * 3_600_000]))
    return name, change + draw(st.integers(-reach, reach))


def following(cron: Cron, name: str, start: int) -> list[int]:
    """``FIRES`` fires from ``start`` by repeated next times, each with bounded work."""
    times, cursor = [], start
    for _ in range(FIRES):
        work = CronWork()
        upcoming = next_trigger_ms(cron.text, cursor, name, work)
        assert work.rounds <= MOST_ROUNDS, (cursor, work)
        assert work.probes <= MOST_PROBES, (cursor, work)
        assert work.months <= MOST_MONTHS, (cursor, work)
        if upcoming is None:
            break
        times.append(upcoming)
        cursor = upcoming
    return times


@PROPERTY
@given(cron=crons(), where=zone_and_start())
def test_next_times_are_the_rules_fires_in_order(cron: Cron, where: tuple[str, int]) -> None:
    name, start = where
    assert validate_cron(cron.text) == cron.text
    times = following(cron, name, start)
    assert times == fires(cron, ZoneInfo(name), start, FIRES, spread(name))
    assert all(a < b for a, b in zip([start, *times], times, strict=False))


@PROPERTY
@given(cron=crons(), where=zone_and_start())
def test_every_fire_is_a_wall_time_of_the_expression_or_its_shift(
    cron: Cron, where: tuple[str, int]
) -> None:
    name, start = where
    tz = ZoneInfo(name)
    for fire in following(cron, name, start):
        local = datetime.fromtimestamp(fire / 1000, tz)
        wall = local.replace(tzinfo=None)
        if cron.matches(wall):
            assert fire in instants(cron, wall, tz)  # not a repeat the rules leave out
            continue
        # Not its own wall time: only a skipped one, shifted by the gap, may fire here.
        shifted = [
            wall - timedelta(minutes=gap)
            for gap in (30, 60)
            if cron.matches(wall - timedelta(minutes=gap))
            and fire in instants(cron, wall - timedelta(minutes=gap), tz)
        ]
        assert shifted and not cron.every_hour, (cron.text, name, local)


@PROPERTY
@given(
    text=st.text(alphabet="0123456789*/-,#LWHR?JANFEBMONSUTD ", max_size=24),
    name=st.sampled_from(ZONES),
    after=st.integers(-(10**15), 10**15),
)
def test_any_text_is_refused_or_computed_never_an_error(text: str, name: str, after: int) -> None:
    try:
        expr = validate_cron(text)
    except ValidationFailedError:
        with pytest.raises(ValidationFailedError):
            Schedule(text, name).first_after(0, after)
        assert Schedule(text, name).end_reason(after) is not None
        return
    upcoming = next_trigger_ms(expr, after, name)
    assert upcoming is None or after < upcoming <= LAST_MS
