"""Integration tests talk to real MySQL, Redis and RabbitMQ."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import redis
import sqlalchemy as sa
from fastapi.testclient import TestClient
from pika.adapters.blocking_connection import BlockingConnection
from sqlalchemy.engine import Engine

from common.broker import connect
from common.clock import ClusterClock
from common.config import ApiSettings, DispatcherSettings, StoreSettings
from common.db.apps import AppCredentials
from services.dispatcher.outcomes.results_thread import ResultsConsumer
from tests.integration.helpers import make_app, public_names, register_worker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test in this folder as an integration test."""
    for item in items:
        if "tests/integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    """The SQL statements the engine sends, in order, while the test runs."""
    sent: list[str] = []

    def record(*args: object) -> None:
        sent.append(str(args[2]))

    sa.event.listen(engine, "before_cursor_execute", record)
    yield sent
    sa.event.remove(engine, "before_cursor_execute", record)


@pytest.fixture
def app_credentials(engine: Engine) -> AppCredentials:
    """An app, and a worker row registering the demo handlers."""
    register_worker(engine)
    return make_app(engine)


@pytest.fixture
def client(namespace: StoreSettings, app_credentials: AppCredentials) -> Iterator[TestClient]:
    """The API on the test's namespace, calling as ``app_credentials``' app."""
    from services.api.app import create_app

    settings = ApiSettings(namespace=namespace.namespace)
    with TestClient(create_app(settings, public_names)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {app_credentials.api_key}"
        yield test_client


@pytest.fixture
def connection(namespace: StoreSettings) -> Iterator[BlockingConnection]:
    """A broker connection to the test's vhost, closed after the test."""
    opened = connect(namespace, "test")
    yield opened
    opened.close()


@pytest.fixture
def results_consumer(
    namespace: StoreSettings, engine: Engine, redis_client: redis.Redis
) -> Iterator[None]:
    """A dispatcher's results consumer, running in a thread for the test's length."""
    settings = DispatcherSettings(namespace=namespace.namespace)
    consumer = ResultsConsumer(settings, engine, ClusterClock(redis_client), "d1")
    stop = threading.Event()
    thread = threading.Thread(target=consumer.run, args=(stop,), daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, namespace: StoreSettings, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """Run ``kairos ARGS`` on the test's namespace in a 200-column terminal; return
    (status, stdout, stderr)."""
    from services.cli import main

    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    monkeypatch.setenv("COLUMNS", "200")

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    return run
