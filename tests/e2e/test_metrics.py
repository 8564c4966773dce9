"""Metrics from running processes: the dispatcher's trigger lag and the worker's runs."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.engine import Engine

from tests.books import Expectation, assert_books
from tests.e2e.harness import Processes, connect_api, free_port, wait_until


def scrape(port: int) -> dict[str, float]:
    """Every sample on the process's /metrics, summed over labels; empty if it is not up."""
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return {}
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


def test_dispatcher_and_worker_count_the_jobs_they_run(
    processes: Processes, engine: Engine
) -> None:
    dispatcher_port, worker_port, api_port = free_port(), free_port(), free_port()
    api_metrics_port = free_port()
    processes.start("d", "dispatcher", "--metrics-port", str(dispatcher_port))
    processes.start("w1", "worker", "--id", "w1", "--metrics-port", str(worker_port))
    processes.start("api", "api", "--port", str(api_port), "--metrics-port", str(api_metrics_port))
    api = connect_api(processes, api_port)
    jobs = [
        api.post_job({"jobName": f"m{i}", "jobHandler": "demo.noop"}).json()["jobId"]
        for i in range(3)
    ]
    for job_id in jobs:
        assert api.wait_status(job_id, {"SUCCEEDED", "FAILED"})["status"] == "SUCCEEDED"
    assert_books(engine, Expectation(jobs, execution_statuses={"SUCCEEDED"}), timeout=30)

    def counted_all() -> dict[str, float] | None:
        found = scrape(dispatcher_port)
        return found if found.get("kairos_executions_finished_total", 0) >= 3 else None

    dispatcher = wait_until(counted_all, 15, what="the dispatcher to count the finished runs")
    assert dispatcher["kairos_trigger_lag_seconds_count"] >= 3
    assert dispatcher["kairos_executions_dispatched_total"] >= 3
    assert dispatcher["kairos_publish_confirm_seconds_count"] > 0
    assert dispatcher.get("kairos_worker_load_score", -1) >= 0, "w1's load score is shown"
    worker = scrape(worker_port)
    assert worker["kairos_worker_runs_total"] >= 3
    assert worker["kairos_execution_start_lag_seconds_count"] >= 3
    # The API's figures are on its metrics port; its public port has no /metrics.
    assert scrape(api_metrics_port)["kairos_api_requests_total"] >= 3
    assert httpx.get(f"http://127.0.0.1:{api_port}/metrics", timeout=2).status_code == 404
