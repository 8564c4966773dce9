"""Queues by meaning: results, callbacks with their tiers as one row, dead letters,
workers; tiers by delay, not by their names as text."""

from __future__ import annotations

from services.api.operator.queue_order import RETRY_TIERS_ROW, ordered_queues, tier_delay_ms


def _queue(name: str, ready: int = 0) -> dict[str, int | str]:
    return {"name": name, "ready": ready, "unacked": 0, "consumers": 0}


def test_retry_tiers_fold_into_one_row_sorted_by_delay_and_the_pipeline_comes_first() -> None:
    names = [
        "kairos.callbacks",
        "kairos.callbacks.dead",
        "kairos.callbacks.retry.10s",
        "kairos.callbacks.retry.120s",
        "kairos.callbacks.retry.14400s",
        "kairos.callbacks.retry.1440s",
        "kairos.callbacks.retry.4500ms",
        "kairos.results",
        "kairos.results.dead",
        "kairos.worker.vm-w1",
        "kairos.worker.vm-w2",
    ]
    rows = ordered_queues([_queue(n, ready=1) for n in names])
    assert [r.name for r in rows] == [
        "kairos.results",
        "kairos.callbacks",
        RETRY_TIERS_ROW,
        "kairos.results.dead",
        "kairos.callbacks.dead",
        "kairos.worker.vm-w1",
        "kairos.worker.vm-w2",
    ]
    tiers = rows[2]
    assert tiers.ready == 5
    assert [t.name.rsplit(".", 1)[1] for t in tiers.tiers] == [
        "4500ms",
        "10s",
        "120s",
        "1440s",
        "14400s",
    ]


def test_a_tier_is_named_by_its_delay() -> None:
    assert tier_delay_ms("kairos.callbacks.retry.30s") == 30_000
    assert tier_delay_ms("kairos.callbacks.retry.4500ms") == 4_500
    assert tier_delay_ms("kairos.callbacks.dead") is None


def test_no_tier_no_tiers_row() -> None:
    assert [r.name for r in ordered_queues([_queue("kairos.results")])] == ["kairos.results"]
