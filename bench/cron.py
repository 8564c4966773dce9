"""Cron next-time cost: what one ``next_trigger_ms`` call costs, per expression and zone.

For every expression and zone below it times ``common.cron.next_trigger_ms`` from a set
of starting points: an ordinary instant, and a second before, half an hour before and a
second after each offset change the zone makes in the year 2026 (spring forward, fall
back). Each starting point is timed over repeated calls (at least one, at most
``--calls``, for at most ``--budget-ms``). A call that raises is counted as an error.
Then it times ``preview(..., 100)`` (what ``GET /openapi/jobs/{id}?preview=100`` asks)
for the every-second expression from just before each zone's first change of 2026.

Last comes one JSON line:

    {"calls": {"<expr> @ <zone>": {"p50_us", "max_us", "errors"}},
     "preview100_ms": {"<zone>": ms or "error"}, "max_us", "commit"}

Pure CPU, no store needed. Run it from the repository root:

    .venv/bin/python bench/cron.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from zoneinfo import ZoneInfo

from harness import git_commit_dirty, log

from common.cron import next_trigger_ms, preview

EXPRESSIONS = (
    "* * * * * *",
    "*/2 * * * * *",
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 9 * * 1-5",
    "*/15 9-17 * * 1-5",
    "0 0 1 1 *",
    "0 0 29 2 *",
    "0 0 L * *",
    "0 0 * 2 1#5",
)
ZONES = (
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Santiago",
)
ORDINARY_MS = 1_781_517_600_250  # 2026-06-15T10:00:00.250Z
YEAR_START_S = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
YEAR_END_S = int(datetime(2027, 1, 1, tzinfo=UTC).timestamp())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="most calls per start")
    parser.add_argument("--budget-ms", type=float, default=50.0, help="time per start")
    return parser.parse_args(argv)


def offset_changes(name: str) -> list[int]:
    """Epoch seconds at which the zone's UTC offset changes in 2026 (hourly probes)."""

    def offset(second: int) -> float:
        moment = datetime.fromtimestamp(second, ZoneInfo(name))
        delta = moment.utcoffset()
        return delta.total_seconds() if delta is not None else 0.0

    changes = []
    for hour in range(YEAR_START_S, YEAR_END_S, 3600):
        if offset(hour) != offset(hour + 3600):
            low, high = hour, hour + 3600
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (middle, high) if offset(middle) == offset(hour) else (low, middle)
            changes.append(high)
    return changes


def starts(name: str) -> list[int]:
    """The starting points (epoch ms) timed in a zone."""
    points = [ORDINARY_MS]
    for change in offset_changes(name):
        points += [change * 1000 - 1000, change * 1000 - 1_800_000, change * 1000 + 1000]
    return points


def per_call_us(call: Callable[[], object], most: int, budget_ms: float) -> float:
    """Mean microseconds of one call, over as many calls as fit the budget."""
    calls, began = 0, time.perf_counter()
    while calls < most:
        call()
        calls += 1
        if (time.perf_counter() - began) * 1000 > budget_ms:
            break
    return (time.perf_counter() - began) * 1e6 / calls


def time_pair(expr: str, zone: str, calls: int, budget_ms: float) -> dict[str, object]:
    """Median and worst per-call cost over the zone's starting points, and errors."""
    costs, errors = [], 0
    for start in starts(zone):
        try:
            next_trigger_ms(expr, start, zone)
        except Exception:
            errors += 1
            continue
        timed = per_call_us(partial(next_trigger_ms, expr, start, zone), calls, budget_ms)
        costs.append(timed)
    if not costs:
        return {"p50_us": None, "max_us": None, "errors": errors}
    return {
        "p50_us": round(statistics.median(costs), 1),
        "max_us": round(max(costs), 1),
        "errors": errors,
    }


def time_preview(zone: str) -> float | str:
    """Milliseconds of a 100-time preview of the every-second cron across a change."""
    changes = offset_changes(zone)
    start = changes[0] * 1000 - 50_000 if changes else ORDINARY_MS
    began = time.perf_counter()
    try:
        times = preview("* * * * * *", start, 100, zone)
    except Exception as e:
        log(f"preview in {zone}: {type(e).__name__}: {e}")
        return "error"
    assert len(times) == 100
    return round((time.perf_counter() - began) * 1000, 2)


def main(argv: list[str] | None = None) -> None:
    """Time every pair and print the JSON line."""
    args = parse_args(argv)
    figures: dict[str, dict[str, object]] = {}
    for expr in EXPRESSIONS:
        for zone in ZONES:
            figures[f"{expr} @ {zone}"] = result = time_pair(expr, zone, args.calls, args.budget_ms)
            log(f"{expr!r:18} {zone:20} {result}")
    previews = {zone: time_preview(zone) for zone in ZONES}
    log(f"preview of 100 every-second times across the first change: {previews}")
    worst = [f["max_us"] for f in figures.values() if isinstance(f["max_us"], float)]
    print(
        json.dumps(
            {
                "calls": figures,
                "preview100_ms": previews,
                "max_us": max(worst),
                "commit": git_commit_dirty(),
            }
        )
    )


if __name__ == "__main__":
    main()
