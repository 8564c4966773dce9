"""End-to-end fixtures: real ``kairos`` processes on a per-test namespace."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.config import StoreSettings
from tests.e2e.harness import CallbackReceiver, Processes


def pytest_configure(config: pytest.Config) -> None:
    """The e2e tier's own markers."""
    config.addinivalue_line("markers", "fair_share: the fair share between apps (issue 21)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test in this folder as an end-to-end test."""
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
def processes(namespace: StoreSettings, tmp_path: Path) -> Iterator[Processes]:
    """Start processes with the test's namespace; all are stopped after the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_NAMESPACE": namespace.namespace,
            "KAIROS_HEARTBEAT_SECONDS": "0.5",
            "KAIROS_HEARTBEAT_STALE_MS": "2500",
            "KAIROS_LEASE_TTL_MS": "1500",
            "KAIROS_PENDING_REPUBLISH_MS": "2000",
            "KAIROS_RETRY_TIERS_SECONDS": "1,1",
            # Workers (and `kairos up`'s workers) register the demo handlers most tests use.
            "KAIROS_HANDLERS": "services.worker.demo",
            # Callback receivers of the tests listen on this machine.
            "KAIROS_CALLBACK_ALLOWED_NETWORKS": "127.0.0.0/8",
        }
    )
    started = Processes(env, tmp_path)
    yield started
    started.stop_all()


@pytest.fixture
def receiver() -> Iterator[CallbackReceiver]:
    """A local callback receiver answering 204."""
    server = CallbackReceiver()
    yield server
    server.close()


# The console's browser tests: headless chromium and a tab that keeps screenshots.
from tests.e2e.browser import browser, console_tab  # noqa: E402, F401
