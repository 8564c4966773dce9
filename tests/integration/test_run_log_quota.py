"""Each app's run-log quota on real MySQL and Redis: the runs of an app past its bytes
per hour keep the lines before and one line saying the quota cut them, and succeed;
another app's runs, on the same worker at the same time, keep every line."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import redis
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from common.clock import ClusterClock
from common.config import StoreSettings
from common.db.apps import MySqlAppTransactions
from common.db.records import AppLimits
from common.keys import RedisKeys
from common.messages import DispatchMessage
from services.worker.log_quota import RunLogQuota, build_run_log_quota, stored_quotas
from services.worker.log_writer import RunLogWriter, mysql_store
from services.worker.registry import collect_handlers
from services.worker.run_logs import LogLine, install_capture
from services.worker.runner import ExecutionRunner
from tests.integration.helpers import make_app

QUOTA = 2_500  # bytes per hour: about two of the runs below
RUNS = 6
LINES = 10
MARK = "run-log quota of 2500 bytes per hour is reached"


@dataclass(frozen=True)
class Stored:
    seq: int
    level: str
    line: str


def app_pk(engine: Engine, api_key: str) -> int:
    with MySqlAppTransactions(engine).reading() as apps:
        app = apps.find_app_by_key(api_key)
    assert app is not None
    return app.id


def with_quota(engine: Engine, name: str, quota: int | None) -> int:
    """A new app with a run-log quota (None: none); its primary key."""
    credentials = make_app(engine, name)
    with MySqlAppTransactions(engine).transaction() as apps:
        apps.set_limits(credentials.app_id, AppLimits(run_log_bytes_per_hour=quota))
    return app_pk(engine, credentials.api_key)


def stored_logs(engine: Engine) -> dict[str, list[Stored]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT execution_id, seq, level, line FROM execution_logs ORDER BY seq")
        )
        logs: dict[str, list[Stored]] = {}
        for r in rows:
            logs.setdefault(str(r.execution_id), []).append(
                Stored(int(r.seq), str(r.level), str(r.line))
            )
    return logs


def lines_of(name: str, run: int) -> list[str]:
    return [f"{name} run {run} line {n} " + "x" * 100 for n in range(LINES)]


def logged(name: str, run: int) -> list[str]:
    """What demo.log stores of ``lines_of``: every other line came through logging."""
    return [x if n % 2 == 0 else f"kairos.demo: {x}" for n, x in enumerate(lines_of(name, run))]


def message(app: int, name: str, run: int) -> DispatchMessage:
    return DispatchMessage(
        execution_id=f"{name}-{run}",
        job_id=run,
        attempt=1,
        trigger_time=0,
        handler="demo.log",
        params={"lines": lines_of(name, run)},
        dispatched_at=0,
        app=app,
    )


@pytest.fixture
def capture() -> Iterator[None]:
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.INFO)  # as the worker's KAIROS_LOG_LEVEL sets it
    handler = install_capture(root)
    yield
    root.removeHandler(handler)
    root.setLevel(level)


def quota_of(client: redis.Redis, namespace: StoreSettings, engine: Engine) -> RunLogQuota:
    return RunLogQuota(
        client, RedisKeys(namespace.namespace), stored_quotas(MySqlAppTransactions(engine))
    )


def run_all(runner: ExecutionRunner, messages: Sequence[DispatchMessage]) -> list[str]:
    """Run the messages four at a time, as a worker's slots do; their outcomes."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(runner.run, messages))
    return [r.status if r is not None else "none" for r in results]


def test_an_app_past_its_quota_loses_lines_with_one_mark_per_run_and_another_app_none(
    engine: Engine, namespace: StoreSettings, redis_client: redis.Redis, capture: None
) -> None:
    noisy = with_quota(engine, "noisy", QUOTA)
    roomy = with_quota(engine, "roomy", 1_000_000)
    quiet = with_quota(engine, "quiet", None)
    writer = RunLogWriter(
        mysql_store(engine),
        64 * 1024,
        interval=0.05,
        quota=quota_of(redis_client, namespace, engine),
    )
    handlers = dict(collect_handlers(["services.worker.demo"]))
    keys, clock = RedisKeys(namespace.namespace), ClusterClock(redis_client)
    runner = ExecutionRunner("w-quota", handlers, redis_client, keys, clock, 60, run_logs=writer)
    apps = {"noisy": noisy, "roomy": roomy, "quiet": quiet}
    # The apps' runs interleaved, as a worker takes them.
    messages = [message(apps[a], a, r) for r in range(RUNS) for a in apps]
    writer.start()
    try:
        outcomes = run_all(runner, messages)
    finally:
        writer.stop()
    assert outcomes == ["SUCCEEDED"] * len(messages)  # the quota never fails a run
    logs = stored_logs(engine)
    for name in ("roomy", "quiet"):
        for r in range(RUNS):
            assert [x.line for x in logs[f"{name}-{r}"]] == logged(name, r)
    kept_bytes = 0
    marks = 0
    for r in range(RUNS):
        stored = logs.get(f"noisy-{r}", [])
        assert [x.seq for x in stored] == list(range(1, len(stored) + 1))
        kept = [x for x in stored if MARK not in x.line]
        assert [x.line for x in kept] == logged("noisy", r)[: len(kept)]
        cut = len(stored) - len(kept)
        assert cut in (0, 1)
        if cut:
            assert stored[-1].level == "WARNING" and MARK in stored[-1].line
        else:
            assert len(kept) == LINES
        marks += cut
        kept_bytes += sum(len(x.line.encode()) for x in kept)
    # The bucket refills under a byte a second while the test runs: no whole line more.
    assert 0 < kept_bytes <= QUOTA + 100
    assert marks >= RUNS - 2


def test_lines_written_again_after_a_failed_write_are_not_counted_twice(
    engine: Engine, namespace: StoreSettings, redis_client: redis.Redis
) -> None:
    noisy = with_quota(engine, "noisy", QUOTA)
    failures = [RuntimeError("MySQL went away")]
    store = mysql_store(engine)

    def flaky(lines: Sequence[LogLine]) -> None:
        if failures:
            raise failures.pop()
        store(lines)

    writer = RunLogWriter(flaky, 64 * 1024, quota=quota_of(redis_client, namespace, engine))
    run_log = writer.open("noisy-0", noisy)
    assert run_log is not None
    for n in range(30):
        run_log.append("INFO", f"line {n} " + "x" * 100)  # 107 or 108 bytes each
    assert writer.write_once() == 0  # refused; the lines wait
    # 23 lines fit in 2,500 bytes (2,474), then the quota's note: counted again, the
    # quota would have cut the run at its first line.
    assert writer.write_once() == 24
    run_log.close()
    lines = stored_logs(engine)["noisy-0"]
    assert len(lines) == 24 and MARK not in lines[22].line and MARK in lines[23].line
    run_log.append("INFO", "after the cut")
    assert writer.write_once() == 0


def test_without_redis_the_quota_lets_lines_through_and_waits_before_asking_again(
    engine: Engine, namespace: StoreSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    noisy = with_quota(engine, "noisy", 100)
    keys = RedisKeys(namespace.namespace)
    quota = build_run_log_quota("redis://127.0.0.1:1/0", keys, MySqlAppTransactions(engine))
    script: Any = quota._script
    calls: list[object] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return script(*args, **kwargs)

    monkeypatch.setattr(quota, "_script", counted)
    writer = RunLogWriter(mysql_store(engine), 64 * 1024, quota=quota)
    run_log = writer.open("noisy-0", noisy)
    assert run_log is not None
    for n in range(5):
        run_log.append("INFO", f"line {n} " + "x" * 100)
    assert writer.write_once() == 5
    run_log.append("INFO", "one more")
    run_log.close()
    assert writer.write_once() == 1
    assert len(stored_logs(engine)["noisy-0"]) == 6
    assert len(calls) == 1  # the second write did not wait for Redis again
