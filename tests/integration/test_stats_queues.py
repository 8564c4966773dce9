"""`kairos stats` lists the queues by meaning, the callback retry tiers in one row that
`--tiers` opens, by delay."""

from __future__ import annotations

import re
import time

import pytest
from pika.adapters.blocking_connection import BlockingConnection

from common.config import StoreSettings
from common.topology import declare_core, declare_retry_tiers
from common.vhost import vhost_queues
from services.cli import main

DELAYS_MS = [10_000, 120_000, 14_400_000, 1_440_000]


def _queue_lines(out: str) -> list[str]:
    """The QUEUE column of the table that ends the output."""
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("QUEUE"))
    return [re.split(r"\s{2,}", line.strip())[0] for line in lines[header + 1 :]]


def test_stats_fold_the_retry_tiers_and_list_the_pipeline_first(
    namespace: StoreSettings,
    connection: BlockingConnection,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    channel = connection.channel()
    declare_core(channel)
    declare_retry_tiers(channel, DELAYS_MS)
    deadline = time.monotonic() + 30
    while len(vhost_queues(namespace)) < 9 and time.monotonic() < deadline:
        time.sleep(0.2)  # the management API lists a new queue a moment later
    monkeypatch.setenv("KAIROS_NAMESPACE", namespace.namespace)
    assert main(["stats"]) == 0
    shown = _queue_lines(capsys.readouterr().out)
    assert shown[:4] == [
        "kairos.results",
        "kairos.callbacks",
        "kairos.callbacks.packs",
        "kairos.callbacks.retry.* (4 tiers)",
    ]
    assert main(["stats", "--tiers"]) == 0
    opened = _queue_lines(capsys.readouterr().out)
    assert opened[4:8] == [
        f"kairos.callbacks.retry.{s}" for s in ("10s", "120s", "1440s", "14400s")
    ]
