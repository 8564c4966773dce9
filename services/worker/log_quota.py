"""Each app's run-log quota: the bytes of run-log text its runs may store per hour,
counted across every worker, so one app that logs without end cannot fill
``execution_logs`` for all.

The count is a byte bucket per app in Redis: it holds up to the quota and refills at
the quota per hour, so an app may log its hour's worth at once and then as fast as it
refills. The run-log writer asks once per write for every app in its batch (one script
call, never one per run); a run whose lines pass what its app is granted keeps the lines
before and, in place of the first it drops, one line saying the quota was reached; it
keeps no more lines after that. The run itself goes on unaffected.

The quotas are read from MySQL every ``QUOTA_REFRESH_SECONDS`` (one query for all apps),
so an operator's change applies within that. When Redis does not answer (within
``REDIS_TIMEOUT_SECONDS``, on a client of its own), lines are kept as if no quota were
set, and Redis is not asked again for ``RETRY_AFTER_SECONDS``: the quota protects
storage, and must neither lose logs of its own accord nor hold up the writes (whose
last lines a finishing run waits for) while Redis is away.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from redis import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from common.db.apps import AppTransactions
from common.keys import RedisKeys
from services.worker.run_logs import LogLine, RunLog

log = logging.getLogger(__name__)

# How often the quotas are read again from MySQL.
QUOTA_REFRESH_SECONDS = 30.0
# At most one warning this often while Redis or MySQL stay away.
WARN_EVERY_SECONDS = 10.0
# How long a Redis call may take before the write goes on without the quota.
REDIS_TIMEOUT_SECONDS = 0.5
# How long lines go uncounted after Redis did not answer, before it is asked again.
RETRY_AFTER_SECONDS = 10.0
HOUR_MS = 3_600_000

# KEYS: one bucket per app. ARGV: the quota (bytes per hour) and the bytes wanted, per
# key in turn. Returns the bytes granted to each: what is wanted, or what is left.
GRANT = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local granted = {}
for i, key in ipairs(KEYS) do
  local quota = tonumber(ARGV[2 * i - 1])
  local want = tonumber(ARGV[2 * i])
  local per_ms = quota / 3600000
  local bucket = redis.call('HMGET', key, 'bytes', 'at')
  local left = tonumber(bucket[1]) or quota
  local at = tonumber(bucket[2]) or now
  left = math.min(quota, left + math.max(0, now - at) * per_ms)
  local grant = math.max(0, math.min(want, math.floor(left)))
  left = left - grant
  redis.call('HSET', key, 'bytes', tostring(left), 'at', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((quota - left) / per_ms) + 1000)
  granted[i] = grant
end
return granted
"""

Taken = list[tuple[RunLog, list[LogLine]]]


def quota_note(quota: int) -> str:
    """The line that ends a run's log once its app's quota is spent."""
    return (
        f"[kairos] log cut: this app's run-log quota of {quota} bytes per hour is reached; "
        "the run's later lines are dropped (the run goes on). An operator raises it with "
        "`kairos app limits APP_ID --run-log-bytes-per-hour N|none`"
    )


def build_run_log_quota(redis_url: str, keys: RedisKeys, apps: AppTransactions) -> RunLogQuota:
    """A quota on its own Redis client with short timeouts and no retries, reading the
    quotas from the apps aggregate (MySQL)."""
    client = Redis.from_url(
        redis_url,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
        retry=Retry(NoBackoff(), 0),
    )
    return RunLogQuota(client, keys, stored_quotas(apps))


def stored_quotas(apps: AppTransactions) -> Callable[[], Mapping[int, int]]:
    """Read every app's run-log quota (``AppStore.run_log_quotas``)."""

    def read() -> Mapping[int, int]:
        with apps.reading() as store:
            return store.run_log_quotas()

    return read


@dataclass
class _Budget:
    """What an app may still keep in this write, and its quota (for the note)."""

    left: int
    quota: int


class RunLogQuota:
    """Counts the lines a write takes against their apps' quotas, and cuts the runs
    whose app has no bytes left."""

    def __init__(
        self,
        client: Redis,
        keys: RedisKeys,
        read_quotas: Callable[[], Mapping[int, int]],
        refresh_seconds: float = QUOTA_REFRESH_SECONDS,
    ) -> None:
        self._keys = keys
        self._read_quotas = read_quotas
        self._refresh_seconds = refresh_seconds
        self._quotas: Mapping[int, int] = {}
        self._read_at = -float("inf")
        self._warned_at = -float("inf")
        self._redis_failed_at = -float("inf")
        self._script = client.register_script(GRANT)

    def admit(self, taken: Taken) -> Taken:
        """The lines of ``taken`` (run, its lines) that their apps' quotas let through,
        a run cut short ending with the quota's note."""
        quotas = self._current_quotas()
        wanted = _wanted(taken, quotas) if quotas else {}
        if not wanted:
            return taken
        granted = self._grant(wanted, quotas)
        if granted is None:
            return taken
        # Only the apps granted less than they asked have lines to drop.
        budgets = {
            app: _Budget(granted[app], quotas[app]) for app in wanted if granted[app] < wanted[app]
        }
        if not budgets:
            return taken
        return [(run, _kept(run, lines, _budget_of(run, budgets))) for run, lines in taken]

    def _current_quotas(self) -> Mapping[int, int]:
        now = time.monotonic()
        if now - self._read_at >= self._refresh_seconds:
            self._read_at = now  # after a failure too: MySQL is asked again next refresh
            try:
                self._quotas = dict(self._read_quotas())
            except Exception as e:  # keep the quotas known; the writer must go on
                self._warn("run-log quotas not read again, MySQL did not answer", e)
        return self._quotas

    def _grant(self, wanted: Mapping[int, int], quotas: Mapping[int, int]) -> dict[int, int] | None:
        """The bytes each app may keep now (one script call for all); None when Redis
        does not answer, or did not a moment ago."""
        if time.monotonic() - self._redis_failed_at < RETRY_AFTER_SECONDS:
            return None
        apps = sorted(wanted)
        args: list[int] = []
        for app in apps:
            args += [quotas[app], wanted[app]]
        try:
            answer = self._script(keys=[self._keys.run_log_quota(a) for a in apps], args=args)
        except (RedisError, OSError) as e:
            self._redis_failed_at = time.monotonic()
            self._warn("run-log quotas not applied, Redis did not answer", e)
            return None
        return {app: int(grant) for app, grant in zip(apps, answer, strict=True)}

    def _warn(self, what: str, error: Exception) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = now
            log.warning("%s: %s", what, error)


def _size(line: LogLine) -> int:
    return line.size or len(line.line.encode("utf-8", "replace"))


def _wanted(taken: Taken, quotas: Mapping[int, int]) -> dict[int, int]:
    """The bytes each app with a quota asks to keep: its lines not counted before."""
    wanted: dict[int, int] = {}
    for run, lines in taken:
        app = run.app
        if app is not None and app in quotas:
            size = sum(_size(x) for x in lines if not x.admitted)
            if size:
                wanted[app] = wanted.get(app, 0) + size
    return wanted


def _budget_of(run: RunLog, budgets: Mapping[int, _Budget]) -> _Budget | None:
    return None if run.app is None else budgets.get(run.app)


def _kept(run: RunLog, lines: list[LogLine], budget: _Budget | None) -> list[LogLine]:
    """The run's lines its app's budget pays for, in order; at the first it cannot pay,
    the quota's note takes that line's place and the run is cut."""
    if budget is None:
        return lines
    for i, line in enumerate(lines):
        if line.admitted:
            continue
        size = _size(line)
        if size > budget.left:
            run.cut()
            log.info(
                "run log cut: its app's run-log quota of %d bytes per hour is spent",
                budget.quota,
                extra={"execution_id": run.execution_id},
            )
            text = quota_note(budget.quota)
            note = LogLine(run.execution_id, line.seq, line.at, "WARNING", text, admitted=True)
            return [*lines[:i], note]
        budget.left -= size
    return lines
