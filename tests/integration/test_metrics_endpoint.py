"""/metrics over HTTP: the API's route, and the server the other services start."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from common.errors import ConfigurationError
from common.metrics import start_metrics_server
from tests.e2e.harness import wait_until
from tests.stores import free_port


def kairos_families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text) if f.name.startswith("kairos_")}


def test_api_serves_metrics_without_an_api_key(client: TestClient) -> None:
    del client.headers["Authorization"]
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = kairos_families(response.text)
    assert {"kairos_trigger_lag_seconds", "kairos_executions_finished"} <= families


def test_metrics_is_left_out_of_the_openapi(client: TestClient) -> None:
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_metrics_server_serves_on_its_port() -> None:
    port = free_port()
    start_metrics_server(port)

    def scrape() -> httpx.Response | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        except httpx.HTTPError:
            return None

    response: httpx.Response = wait_until(scrape, 10, what="the metrics server")
    assert response.status_code == 200
    assert "kairos_publish_confirm_seconds" in kairos_families(response.text)


def test_metrics_server_on_a_taken_port_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(ConfigurationError, match="KAIROS_METRICS_PORT"):
            start_metrics_server(port)
