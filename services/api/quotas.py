"""The quotas an operator sets per app (``kairos app limits``), applied at the API.

``max_jobs``: the most jobs an app keeps stored (waiting, running or paused, not
deleted); a create or a batch that would pass it is a 429 naming the quota, and a batch
is refused whole (it is all or nothing). ``min_cron_interval_seconds``: the shortest gap
a schedule of the app may have between two triggers (a fixed rate: its seconds; a cron:
the smallest gap among its next ``CRON_GAPS_LOOKED_AT`` triggers); a schedule under it is
a 422 naming the field (``jobs[i].cronExpr`` in a batch, item by item as every other bad
field). An app without the quota pays nothing: no count, no lookahead.
``max_retries``: the most retries a job of the app may ask for (a 422 naming
``maxRetries``); the dispatcher also gives a failed run no more than it, so lowering the
limit binds jobs stored before.

The count is read before the insert, outside the insert's lock: creates racing at the
very limit may pass it by how many arrive at once.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import pairwise

from sqlalchemy.engine import Connection

from common.db.apps import App, MySqlAppStore
from common.errors import JobQuotaExceededError, RetriesOverLimitError, ScheduleTooFrequentError
from common.schedule import Schedule

# Enough triggers to meet a cron's closest pair within a day's or a week's pattern.
CRON_GAPS_LOOKED_AT = 64
DAY_MS = 86_400_000


def check_job_quota(conn: Connection, app: App, adding: int) -> None:
    """Raise ``JobQuotaExceededError`` if ``adding`` more jobs would pass the app's
    ``max_jobs``."""
    quota = app.limits.max_jobs
    if quota is None or adding <= 0:
        return
    stored = MySqlAppStore(conn).stored_job_count(app.id)
    if stored + adding > quota:
        raise JobQuotaExceededError(app.app_id, quota, stored, adding)


def shortest_gap_seconds(schedule: Schedule, now_ms: int) -> float | None:
    """The smallest gap between two triggers of ``schedule`` from about ``now_ms`` on;
    None for a one-shot job, or a cron with fewer than two triggers left."""
    if schedule.fixed_rate_seconds is not None:
        return float(schedule.fixed_rate_seconds)
    if schedule.cron_expr is None:
        return None
    # From the day's start, so that a batch of one cron looks ahead once (cached).
    return _cron_gap_seconds(schedule.cron_expr, schedule.timezone, now_ms // DAY_MS * DAY_MS)


@lru_cache(maxsize=1024)
def _cron_gap_seconds(cron_expr: str, timezone: str, from_ms: int) -> float | None:
    times = Schedule(cron_expr, timezone).preview(from_ms, CRON_GAPS_LOOKED_AT + 1)[1:]
    gaps = [later - earlier for earlier, later in pairwise(times)]
    return min(gaps) / 1000 if gaps else None


def check_schedule_interval(schedule: Schedule, app: App, now_ms: int) -> None:
    """Raise ``ScheduleTooFrequentError`` (naming ``cronExpr`` or ``fixedRateSeconds``)
    if the schedule fires more often than the app's ``min_cron_interval_seconds``."""
    minimum = app.limits.min_cron_interval_seconds
    if minimum is None:
        return
    gap = shortest_gap_seconds(schedule, now_ms)
    if gap is not None and gap < minimum:
        field = "cronExpr" if schedule.cron_expr is not None else "fixedRateSeconds"
        raise ScheduleTooFrequentError(field, app.app_id, gap, minimum)


def check_retries(max_retries: int, app: App) -> None:
    """Raise ``RetriesOverLimitError`` (naming ``maxRetries``) if a job asks for more
    retries than the app's ``max_retries`` limit."""
    limit = app.limits.max_retries
    if max_retries > limit:
        raise RetriesOverLimitError(app.app_id, max_retries, limit)
