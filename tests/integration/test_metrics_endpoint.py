"""/metrics over HTTP: none on the API's port; the metrics server every service starts,
with its /healthz and /readyz."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from common.config import StoreSettings
from common.errors import ConfigurationError
from common.probes import Health, serve_probes, store_probes
from common.runtime import ServiceStop, keep_serving
from tests.e2e.harness import wait_until
from tests.stores import free_port


def kairos_families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text) if f.name.startswith("kairos_")}


def test_the_api_port_serves_no_metrics(client: TestClient) -> None:
    del client.headers["Authorization"]
    response = client.get("/metrics")
    assert response.status_code == 404
    assert "kairos_" not in response.text


def test_metrics_is_left_out_of_the_openapi(client: TestClient) -> None:
    assert "/metrics" not in client.get("/openapi.json").json()["paths"]


def test_the_api_serves_its_metrics_on_its_metrics_port(
    namespace: StoreSettings, client: TestClient
) -> None:
    from common.config import ApiSettings
    from services.api.main import serve_metrics

    assert client.get("/openapi/jobs").status_code == 200
    port = free_port()
    serve_metrics(ApiSettings(namespace=namespace.namespace, metrics_port=port))
    response = wait_until(lambda: _get(port, "/metrics"), 10, what="the API's metrics port")
    families = kairos_families(response.text)
    assert {"kairos_api_requests", "kairos_trigger_lag_seconds"} <= families
    ready = _get(port, "/readyz")
    assert ready is not None and ready.json()["checks"] == {"mysql": "ok", "redis": "ok"}


def _get(port: int, path: str) -> httpx.Response | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=2)
    except httpx.HTTPError:
        return None


def serving(health: Health) -> int:
    """Serve ``health`` on a free port once it answers; return the port."""
    port = free_port()
    serve_probes(health, port, "127.0.0.1")

    def healthz() -> httpx.Response | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        except httpx.HTTPError:
            return None

    answer: httpx.Response = wait_until(healthz, 10, what="the metrics server")
    assert answer.status_code == 200 and answer.json() == {"status": "ok"}
    return port


def test_metrics_server_serves_on_its_port() -> None:
    port = serving(Health(threading.Event()))
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    assert response.status_code == 200
    assert "kairos_publish_confirm_seconds" in kairos_families(response.text)


def readyz(port: int) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)


def test_readyz_is_200_while_the_stores_answer_and_every_loop_serves(
    namespace: StoreSettings,
) -> None:
    stop = ServiceStop()
    for name, probe in store_probes(namespace):
        stop.health.add_probe(name, probe)
    port = serving(stop.health)
    assert (readyz(port).status_code, readyz(port).json()["checks"]) == (
        200,
        {"mysql": "ok", "redis": "ok"},
    )

    attempts: list[int] = []

    def serve() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            assert readyz(port).json()["checks"]["results consumer"] == "ok"
            raise OSError("broker gone")
        stop.set()  # the second attempt: the service is asked to stop

    keep_serving("results consumer", serve, stop)
    answer = readyz(port)
    assert answer.status_code == 503
    assert answer.json() == {
        "ready": False,
        "checks": {
            "mysql": "ok",
            "redis": "ok",
            "results consumer": "ok",
            "stopping": "the service is stopping",
        },
    }


def test_readyz_names_a_loop_waiting_to_try_again() -> None:
    health = Health(threading.Event())
    port = serving(health)
    health.loop_running("notifier")
    health.loop_waiting("notifier", ConnectionResetError())
    answer = readyz(port)
    assert answer.status_code == 503
    assert answer.json()["checks"] == {
        "notifier": "waiting to try again after ConnectionResetError"
    }


def test_readyz_is_503_naming_a_store_that_does_not_answer_without_its_address(
    namespace: StoreSettings,
) -> None:
    away = namespace.model_copy(
        update={"database_url": "mysql+pymysql://kairos:s3cret@127.0.0.1:1"}
    )
    health = Health(threading.Event())
    for name, probe in store_probes(away):
        health.add_probe(name, probe)
    answer = readyz(serving(health))
    assert answer.status_code == 503
    assert answer.json()["checks"] == {"mysql": "unavailable", "redis": "ok"}
    assert "s3cret" not in answer.text and "127.0.0.1" not in answer.text


def test_metrics_server_on_a_taken_port_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        with pytest.raises(ConfigurationError, match="KAIROS_METRICS_PORT"):
            serve_probes(Health(threading.Event()), port, "127.0.0.1")
