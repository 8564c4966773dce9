"""kairos workers and kairos stats: ages by the cluster clock, stale workers marked, ids
whole in any width; rates, lag percentiles and queue depths; JSON for both."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.activity import ActivityPublisher
from common.broker import BatchPublisher, OutgoingMessage
from common.clock import ClusterClock
from common.config import StoreSettings
from common.keys import RedisKeys
from common.topology import declare_core, declare_worker_queue, worker_queue
from services.cli import main
from tests.integration.helpers import register_worker

LONG_ID = "worker-on-a-host-with-a-rather-long-name-0123456789"


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, namespace: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> Any:
    """Run ``kairos ARGS`` on the test's namespace; return (status, stdout, stderr)."""
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run


def test_workers_show_ages_by_the_cluster_clock_and_mark_stale_ones(
    cli: Any,
    engine: Engine,
    redis_client: redis.Redis,
    connection: BlockingConnection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = ClusterClock(redis_client).now_ms()
    register_worker(engine, LONG_ID, now_ms=now)
    register_worker(engine, "w2", now_ms=now - 60_000)
    channel = connection.channel()
    declare_core(channel)
    declare_worker_queue(channel, LONG_ID)
    BatchPublisher(channel).publish([OutgoingMessage("", worker_queue(LONG_ID), b"{}", "m1")])

    status, out, err = cli("workers", "-o", "json")
    assert status == 0 and err == ""
    shown = {w["workerId"]: w for w in json.loads(out)["workers"]}
    assert set(shown) == {LONG_ID, "w2"}
    assert not shown[LONG_ID]["stale"] and shown["w2"]["stale"]
    assert shown[LONG_ID]["heartbeatAgeSeconds"] < 30
    assert 60 <= shown["w2"]["heartbeatAgeSeconds"] < 90
    # The management API's counts lag a few seconds behind the queue.
    assert shown[LONG_ID]["queue"]["consumers"] == 0
    assert shown[LONG_ID]["queue"]["ready"] in (0, 1)
    assert shown["w2"]["queue"] is None
    parts = shown[LONG_ID]["scoreParts"]
    assert shown[LONG_ID]["score"] == pytest.approx(parts["runs"] + parts["avgRun"] + parts["cpu"])

    monkeypatch.setenv("COLUMNS", "60")  # narrower than the table: ids stay whole
    status, out, _ = cli("workers")
    lines = out.splitlines()
    assert any(line.startswith(LONG_ID + " ") for line in lines), out
    (w2,) = [line for line in lines if line.startswith("w2 ")]
    assert "STALE" in w2


def test_no_worker_yet_says_so(cli: Any) -> None:
    assert cli("workers")[:2] == (0, "no worker has sent a heartbeat yet\n")
    _, out, _ = cli("workers", "-o", "json")
    assert json.loads(out) == {"workers": []}


def test_stats_shows_rates_lag_percentiles_and_queues(
    cli: Any, namespace: StoreSettings, redis_client: redis.Redis, connection: BlockingConnection
) -> None:
    declare_core(connection.channel())
    counts = {
        "finished:SUCCEEDED": 90.0,
        "finished:FAILED": 8.0,
        "finished:LOST": 2.0,
        "lag_le:0.1": 95.0,
        "lag_le:1.0": 99.0,
        "lag_le:+Inf": 100.0,
    }
    keys, clock = RedisKeys(namespace.namespace), ClusterClock(redis_client)
    ActivityPublisher(redis_client, keys, clock, lambda: counts).publish()

    status, out, err = cli("stats", "-o", "json")
    assert status == 0 and err == ""
    stats = json.loads(out)
    assert stats["finished"] == {"FAILED": 8, "LOST": 2, "SUCCEEDED": 90}
    assert (stats["succeeded"], stats["failed"]) == (90, 10)
    assert 240 <= stats["windowSeconds"] <= 300
    assert stats["finishedPerSecond"] == pytest.approx(100 / stats["windowSeconds"], abs=0.001)
    lag = stats["triggerLagSeconds"]
    assert lag["p50"] == pytest.approx(0.1 * 50 / 95)
    assert lag["p99"] == pytest.approx(1.0)
    assert stats["workers"] == {"live": 0, "stale": 0, "known": 0}
    assert stats["deadCallbacks"] == 0
    names = {q["name"] for q in stats["queues"]}
    assert {"kairos.results", "kairos.callbacks", "kairos.callbacks.dead"} <= names

    status, out, _ = cli("stats", "--minutes", "1")
    assert status == 0
    assert "trigger lag" in out and "p99 1.0s" in out
    assert "kairos.results" in out


def test_stats_without_the_management_api_still_shows_the_rest(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAIROS_AMQP_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:1")
    status, out, err = cli("stats", "-o", "json")
    assert status == 0
    assert err.startswith("kairos: queue depths left out: RabbitMQ management API")
    assert "guest:guest" not in err
    assert json.loads(out)["queues"] == []


def test_workers_drain_and_undrain_a_worker(
    cli: Any, engine: Engine, redis_client: redis.Redis, namespace: StoreSettings
) -> None:
    keys = RedisKeys(namespace.namespace)
    register_worker(engine, "w1", now_ms=ClusterClock(redis_client).now_ms())
    status, out, _err = cli("workers", "drain", "w1")
    assert status == 0 and "takes no new work" in out
    assert redis_client.get(keys.worker_drained("w1")) is not None
    status, out, _err = cli("workers", "-o", "json")
    (shown,) = json.loads(out)["workers"]
    assert shown["drained"] is True and shown["drainRequested"] is False
    status, out, _err = cli("workers")
    assert "(drained)" in out
    status, out, _err = cli("workers", "undrain", "w1")
    assert status == 0 and "takes work again" in out
    assert redis_client.get(keys.worker_drained("w1")) is None
    status, _out, err = cli("workers", "undrain", "w1")
    assert status == 1 and "is not drained" in err
    status, _out, err = cli("workers", "drain", "w9")
    assert status == 2 and "no worker has that id" in err
