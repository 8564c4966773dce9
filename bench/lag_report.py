"""Trigger-lag figures: the executions a scenario produced, summarised and printed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harness import Submission, percentile

from common.states import ExecutionStatus

CRON_EVERY_SECOND = "* * * * * *"


@dataclass(frozen=True)
class Row:
    """One execution, as the figures need it."""

    job_id: int
    trigger_time: int
    status: str
    dispatched_at: int | None
    started_at: int | None


@dataclass(frozen=True)
class Burst:
    """One submitted burst: its instant T, what the POSTs saw, and the margin left."""

    trigger_at: int
    seen: Submission
    margin_ms: int


@dataclass(frozen=True)
class CronRun:
    """The cron jobs and the window of whole seconds measured."""

    seen: Submission
    window_start: int
    window_end: int


def summarize(values: Iterable[int]) -> dict[str, int] | None:
    """Nearest-rank p50/p90/p99/max, or None when there is nothing to summarise."""
    ordered = sorted(values)
    if not ordered:
        return None
    return {
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "max": ordered[-1],
    }


def trigger_lags(rows: Iterable[Row]) -> list[int]:
    """dispatched_at - trigger_time of every dispatched execution."""
    return [r.dispatched_at - r.trigger_time for r in rows if r.dispatched_at is not None]


def start_lags(rows: Iterable[Row]) -> list[int]:
    """started_at - trigger_time of every started execution."""
    return [r.started_at - r.trigger_time for r in rows if r.started_at is not None]


def status_counts(rows: Iterable[Row]) -> dict[str, int]:
    """Executions by status."""
    return dict(sorted(Counter(r.status for r in rows).items()))


def in_window(run: CronRun, rows: Iterable[Row]) -> list[Row]:
    """The executions whose trigger falls in the measured window."""
    return [r for r in rows if run.window_start <= r.trigger_time < run.window_end]


def burst_figures(burst: Burst, rows: list[Row]) -> dict[str, Any]:
    """The JSON figures of scenario A."""
    return {
        "jobs_per_instant": burst.seen.accepted,
        "submit_margin_ms": burst.margin_ms,
        "trigger_lag_ms": summarize(trigger_lags(rows)),
        "start_lag_ms": summarize(start_lags(rows)),
    }


def cron_figures(cron_seconds: int, run: CronRun, rows: list[Row]) -> dict[str, Any]:
    """The JSON figures of scenario B, over the measured window."""
    inside = in_window(run, rows)
    per_job = Counter({job_id: 0 for job_id in run.seen.job_ids})
    per_job.update(r.job_id for r in inside)
    return {
        "cron_jobs": run.seen.accepted,
        "cron_seconds": cron_seconds,
        "cron_trigger_lag_ms": summarize(trigger_lags(inside)),
        "cron_start_lag_ms": summarize(start_lags(inside)),
        "cron_runs": {
            "expected_per_job": cron_seconds,
            "min_per_job": min(per_job.values(), default=0),
            "max_per_job": max(per_job.values(), default=0),
            "total": len(inside),
            "skipped": sum(r.status == ExecutionStatus.SKIPPED for r in inside),
        },
    }


def lag_line(label: str, values: list[int]) -> str:
    """One human line: count, percentiles, and how many are negative (fired early)."""
    figures = summarize(values)
    if figures is None:
        return f"{label} none measured"
    early = sum(v < 0 for v in values)
    shown = ", ".join(f"{k} {v}" for k, v in figures.items())
    return f"{label} n={len(values)}: {shown} ms (min {min(values)}; before T: {early})"


def dispatch_instants(rows: Iterable[Row], shown: int = 8) -> dict[int, int]:
    """The ``shown`` largest groups of executions sent together, by trigger lag."""
    groups = Counter(trigger_lags(rows)).most_common(shown)
    return dict(sorted(groups))


def print_burst(burst: Burst, rows: list[Row]) -> None:
    """Human lines for scenario A."""
    missing = set(burst.seen.job_ids) - {r.job_id for r in rows}
    print(f"A jobs per instant: {burst.seen.accepted}, T = {burst.trigger_at} ms")
    print(f"A executions:      {status_counts(rows)}; jobs with none: {len(missing)}")
    print(lag_line("A trigger lag:    ", trigger_lags(rows)))
    print(lag_line("A start lag:      ", start_lags(rows)))
    print(f"A dispatch instants (ms after T: executions): {dispatch_instants(rows)}")


def print_cron(run: CronRun, rows: list[Row], figures: dict[str, Any]) -> None:
    """Human lines for scenario B."""
    inside = in_window(run, rows)
    per_job = Counter({job_id: 0 for job_id in run.seen.job_ids})
    per_job.update(r.job_id for r in inside)
    spread = dict(sorted(Counter(per_job.values()).items()))
    print(f"B cron jobs:       {run.seen.accepted} x '{CRON_EVERY_SECOND}'")
    print(f"B window:          [{run.window_start}, {run.window_end}) ms")
    print(f"B executions:      in window {status_counts(inside)}; all {status_counts(rows)}")
    print(f"B triggers per job in window (count: jobs): {spread}; {figures['cron_runs']}")
    for row in [r for r in inside if r.status == ExecutionStatus.SKIPPED][:5]:
        print(f"B SKIPPED:         job {row.job_id} trigger {row.trigger_time}")
    print(lag_line("B trigger lag:    ", trigger_lags(inside)))
    print(lag_line("B start lag:      ", start_lags(inside)))


def print_duplicates(duplicates: list[tuple[int, int, int]]) -> None:
    """Human lines for triggers with more than one execution."""
    print(f"duplicate triggers (same job_id and trigger_time): {len(duplicates)}")
    for job_id, trigger_time, count in duplicates[:10]:
        print(f"  job {job_id} trigger {trigger_time}: {count} executions")
