"""Metrics: every name registered and exposed, and the helpers count what they should.

prometheus_client's registry is process-wide, so tests compare a sample before and after
instead of expecting absolute values.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from common import metrics
from common.config import DispatcherSettings, NotifierSettings, WorkerSettings
from common.loadbalance import WorkerLoad, load_score
from services.cli import build_parser

EXPECTED = {
    "kairos_claim_batch_triggers": "histogram",
    "kairos_triggers_claimed": "counter",
    "kairos_triggers_skipped": "counter",
    "kairos_executions_dispatched": "counter",
    "kairos_trigger_lag_seconds": "histogram",
    "kairos_executions_finished": "counter",
    "kairos_executions_reconciled": "counter",
    "kairos_results_set_aside": "counter",
    "kairos_store_conflicts": "counter",
    "kairos_executions_held": "counter",
    "kairos_executions_recalled": "counter",
    "kairos_worker_load_score": "gauge",
    "kairos_worker_active_runs": "gauge",
    "kairos_worker_queue_depth_messages": "gauge",
    "kairos_publish_confirm_seconds": "histogram",
    "kairos_messages_published": "counter",
    "kairos_messages_returned": "counter",
    "kairos_publish_failures": "counter",
    "kairos_worker_runs": "counter",
    "kairos_handler_duration_seconds": "histogram",
    "kairos_worker_overrunning_runs": "gauge",
    "kairos_execution_start_lag_seconds": "histogram",
    "kairos_callback_attempts": "counter",
    "kairos_callbacks_deferred": "counter",
    "kairos_callback_host_waiting": "gauge",
    "kairos_callback_host_in_flight": "gauge",
    "kairos_callback_host_limit": "gauge",
    "kairos_callback_app_waiting": "gauge",
    "kairos_callbacks_orphaned": "counter",
    "kairos_queue_depth_messages": "gauge",
    "kairos_handler_live_workers": "gauge",
    "kairos_app_runs_waiting": "gauge",
    "kairos_app_runs_going": "gauge",
    "kairos_app_start_lag_seconds": "histogram",
    "kairos_api_requests": "counter",
    "kairos_api_request_duration_seconds": "histogram",
}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def exposed() -> dict[str, str]:
    text = metrics.exposition().decode()
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_every_metric_is_registered_with_its_type() -> None:
    families = exposed()
    for name, kind in EXPECTED.items():
        assert families.get(name) == kind, name


def test_every_kairos_metric_is_expected_and_documented() -> None:
    text = metrics.exposition().decode()
    families = [
        f
        for f in text_string_to_metric_families(text)
        if f.name.startswith("kairos_") and not f.name.endswith("_created")
    ]
    assert {f.name for f in families} == set(EXPECTED)
    for family in families:
        assert len(family.documentation) > 20, family.name


def test_exposition_content_type_is_the_text_format() -> None:
    assert metrics.EXPOSITION_CONTENT_TYPE.startswith("text/plain")


def test_claim_counts_triggers_and_ignores_empty_passes() -> None:
    batches = sample("kairos_claim_batch_triggers_count")
    claimed = sample("kairos_triggers_claimed_total")
    skipped = sample("kairos_triggers_skipped_total", stage="claim")
    metrics.observe_claim(0, 0)
    metrics.observe_claim(7, 2)
    assert sample("kairos_claim_batch_triggers_count") == batches + 1
    assert sample("kairos_triggers_claimed_total") == claimed + 7
    assert sample("kairos_triggers_skipped_total", stage="claim") == skipped + 2


@dataclass(frozen=True)
class Sent:
    execution_id: str
    worker_id: str
    attempt: int
    trigger_time: int


def test_dispatch_counts_landed_executions_and_the_lag_of_first_attempts() -> None:
    lags = sample("kairos_trigger_lag_seconds_count")
    lag_sum = sample("kairos_trigger_lag_seconds_sum")
    on_a = sample("kairos_executions_dispatched_total", worker_id="unit-a")
    on_b = sample("kairos_executions_dispatched_total", worker_id="unit-b")
    sent = [
        Sent("e1", "unit-a", 1, 10_000),
        Sent("e2", "unit-a", 1, 10_500),
        Sent("e3", "unit-b", 2, 1_000),
        Sent("e4", "unit-b", 1, 10_000),
    ]
    metrics.observe_dispatched(sent, {"e4"}, now_ms=11_000)
    assert sample("kairos_executions_dispatched_total", worker_id="unit-a") == on_a + 2
    assert sample("kairos_executions_dispatched_total", worker_id="unit-b") == on_b + 1
    assert sample("kairos_trigger_lag_seconds_count") == lags + 2, "retry and returned left out"
    assert sample("kairos_trigger_lag_seconds_sum") == pytest.approx(lag_sum + 1.5)


def test_publish_counts_by_exchange_and_skips_bare_commits() -> None:
    batches = sample("kairos_publish_confirm_seconds_count")
    dispatch = sample("kairos_messages_published_total", exchange="kairos.dispatch")
    default = sample("kairos_messages_published_total", exchange="amq.default")
    returned = sample("kairos_messages_returned_total")
    metrics.observe_publish([], 0, 0.004)
    assert sample("kairos_publish_confirm_seconds_count") == batches
    metrics.observe_publish(["kairos.dispatch", "kairos.dispatch", ""], 1, 0.004)
    assert sample("kairos_publish_confirm_seconds_count") == batches + 1
    assert sample("kairos_messages_published_total", exchange="kairos.dispatch") == dispatch + 2
    assert sample("kairos_messages_published_total", exchange="amq.default") == default + 1
    assert sample("kairos_messages_returned_total") == returned + 1


def test_finished_counts_by_status() -> None:
    before = sample("kairos_executions_finished_total", status="LOST")
    metrics.observe_finished(["LOST", "SUCCEEDED", "LOST"])
    assert sample("kairos_executions_finished_total", status="LOST") == before + 2


def load(worker_id: str, active: int) -> WorkerLoad:
    return WorkerLoad(worker_id, active, 120.0, 80.0, frozenset({"demo.noop"}))


def test_worker_loads_show_live_workers_and_drop_gone_ones() -> None:
    live = [load("unit-w1", 3), load("unit-w2", 0)]
    metrics.set_worker_loads(live)
    assert sample("kairos_worker_load_score", worker_id="unit-w1") == load_score(live[0])
    assert sample("kairos_worker_active_runs", worker_id="unit-w1") == 3
    metrics.set_worker_loads([load("unit-w2", 1)])
    assert REGISTRY.get_sample_value("kairos_worker_load_score", {"worker_id": "unit-w1"}) is None
    assert REGISTRY.get_sample_value("kairos_worker_active_runs", {"worker_id": "unit-w1"}) is None
    assert sample("kairos_worker_active_runs", worker_id="unit-w2") == 1
    metrics.set_worker_loads([])


def test_queue_depth_is_set_and_dropped_with_its_queue() -> None:
    metrics.set_queue_depth("unit-q", 42)
    assert sample("kairos_worker_queue_depth_messages", worker_id="unit-q") == 42
    metrics.set_queue_depth("unit-q", None)
    metrics.set_queue_depth("unit-never", None)
    labels = {"worker_id": "unit-q"}
    assert REGISTRY.get_sample_value("kairos_worker_queue_depth_messages", labels) is None


def test_leaving_the_lead_drops_every_worker_gauge() -> None:
    metrics.set_worker_loads([load("unit-lead", 2)])
    metrics.set_queue_depth("unit-lead", 5)
    metrics.clear_worker_gauges()
    for name in ("load_score", "active_runs", "queue_depth_messages"):
        labels = {"worker_id": "unit-lead"}
        assert REGISTRY.get_sample_value(f"kairos_worker_{name}", labels) is None


def test_runs_count_by_handler_and_outcome_with_their_duration() -> None:
    runs = sample("kairos_worker_runs_total", handler="unit.h", outcome="FAILED")
    durations = sample("kairos_handler_duration_seconds_count", handler="unit.h")
    metrics.observe_run("unit.h", "FAILED", 0.02)
    assert sample("kairos_worker_runs_total", handler="unit.h", outcome="FAILED") == runs + 1
    assert sample("kairos_handler_duration_seconds_count", handler="unit.h") == durations + 1


def test_start_lag_counts_first_attempts_only() -> None:
    before = sample("kairos_execution_start_lag_seconds_count")
    metrics.observe_start(trigger_time=1_000, started_ms=1_250, attempt=1)
    metrics.observe_start(trigger_time=1_000, started_ms=9_000, attempt=3)
    assert sample("kairos_execution_start_lag_seconds_count") == before + 1


def test_latency_buckets_reach_from_a_millisecond_to_ten_seconds() -> None:
    assert metrics.LATENCY_BUCKETS[0] == 0.001
    assert metrics.LATENCY_BUCKETS[-1] == 10.0
    assert list(metrics.LATENCY_BUCKETS) == sorted(metrics.LATENCY_BUCKETS)


@pytest.mark.parametrize("settings", [DispatcherSettings, WorkerSettings, NotifierSettings])
def test_metrics_port_comes_from_the_environment(
    settings: type[DispatcherSettings | WorkerSettings | NotifierSettings],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAIROS_METRICS_PORT", raising=False)
    monkeypatch.delenv("KAIROS_METRICS_HOST", raising=False)
    assert settings().metrics_port is None
    assert settings().metrics_host == "127.0.0.1"
    monkeypatch.setenv("KAIROS_METRICS_PORT", "9190")
    assert settings().metrics_port == 9190


@pytest.mark.parametrize("command", ["dispatcher", "worker", "notifier"])
def test_services_take_a_metrics_port_flag(command: str) -> None:
    args = build_parser().parse_args([command, "--metrics-port", "9191"])
    assert args.metrics_port == 9191
    assert build_parser().parse_args([command]).metrics_port is None


def test_app_labels_stay_bounded_and_the_rest_is_other() -> None:
    from common.metrics import AppLabels

    labels = AppLabels(most=2)
    assert [labels.of(a) for a in ("a", "b", "c", "a", "d")] == ["a", "b", "other", "a", "other"]


def test_an_apps_standing_goes_to_zero_once_it_has_nothing_waiting() -> None:
    from prometheus_client import REGISTRY

    from common.metrics import AppLabels, set_app_standing

    labels = AppLabels()
    set_app_standing(labels, {"app_x": 5}, {"app_x": 2})
    assert REGISTRY.get_sample_value("kairos_app_runs_waiting", {"app": "app_x"}) == 5
    set_app_standing(labels, {}, {})
    assert REGISTRY.get_sample_value("kairos_app_runs_waiting", {"app": "app_x"}) == 0
    assert REGISTRY.get_sample_value("kairos_app_runs_going", {"app": "app_x"}) == 0
