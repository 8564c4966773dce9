"""Chaos suite fixtures: the processes of one scenario, and the table of every outcome."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from common.config import StoreSettings
from tests.e2e.harness import CallbackReceiver, Processes


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test in this folder as a chaos test."""
    for item in items:
        if "tests/chaos" in str(item.fspath):
            item.add_marker(pytest.mark.chaos)


@dataclass
class Outcome:
    """One scenario's line in the table printed at the end: ``lost`` and ``duplicated``
    count jobs with no side effect and with more than one in the ledger;
    ``callback_copies`` the callback requests beyond the first of their delivery."""

    scenario: str
    submitted: int
    succeeded: int
    lost: int
    duplicated: int
    callback_copies: int
    recovered_s: float


OUTCOMES: list[Outcome] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the table of the scenarios that ran."""
    if not OUTCOMES:
        return
    write = terminalreporter.write_line
    write("")
    write(
        f"{'scenario':44} {'submitted':>9} {'succeeded':>9} {'lost':>5} {'dup':>4} "
        f"{'cb_copies':>9} {'recover_s':>9}"
    )
    for o in OUTCOMES:
        write(
            f"{o.scenario:44} {o.submitted:9d} {o.succeeded:9d} {o.lost:5d} "
            f"{o.duplicated:4d} {o.callback_copies:9d} {o.recovered_s:9.1f}"
        )


@pytest.fixture
def processes(namespace: StoreSettings, tmp_path: Path) -> Iterator[Processes]:
    """Processes on the test's namespace, with short heartbeats, leases and tiers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_NAMESPACE": namespace.namespace,
            "KAIROS_HEARTBEAT_SECONDS": "0.5",
            "KAIROS_HEARTBEAT_STALE_MS": "2500",
            "KAIROS_LEASE_TTL_MS": "1500",
            "KAIROS_PENDING_REPUBLISH_MS": "2000",
            "KAIROS_RETRY_TIERS_SECONDS": "1,1,2,5",
            "KAIROS_RECONCILE_AFTER_SECONDS": "20",
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
