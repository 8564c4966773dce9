"""The run-log quota's answers that need no Redis: no quota, or quotas MySQL could not
give, let every line through, and the quotas are read once per refresh."""

from __future__ import annotations

from collections.abc import Mapping

import redis

from common.keys import RedisKeys
from services.worker.log_quota import RunLogQuota, quota_note
from services.worker.run_logs import LogLine, RunLog

NOWHERE = "redis://127.0.0.1:1/0"


def batch() -> list[tuple[RunLog, list[LogLine]]]:
    run_log = RunLog("ex-1", 1000, app=3)
    run_log.append("INFO", "a line")
    return [(run_log, run_log.take())]


def test_apps_without_a_quota_are_not_counted_and_mysql_is_read_once_per_refresh() -> None:
    reads: list[int] = []

    def read() -> Mapping[int, int]:
        reads.append(1)
        return {}

    quota = RunLogQuota(redis.Redis.from_url(NOWHERE), RedisKeys("t"), read, 3600)
    taken = batch()
    assert quota.admit(taken) is taken
    assert quota.admit(batch()) is not None and len(reads) == 1


def test_quotas_mysql_could_not_give_let_lines_through_and_wait_for_the_next_refresh() -> None:
    reads: list[int] = []

    def read() -> Mapping[int, int]:
        reads.append(1)
        raise OSError("MySQL went away")

    quota = RunLogQuota(redis.Redis.from_url(NOWHERE), RedisKeys("t"), read, 3600)
    taken = batch()
    assert quota.admit(taken) is taken
    quota.admit(batch())
    assert len(reads) == 1


def test_the_note_names_the_quota_and_how_to_raise_it() -> None:
    note = quota_note(2048)
    assert "2048 bytes per hour" in note and "--run-log-bytes-per-hour" in note
