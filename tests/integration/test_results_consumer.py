"""The results consumer on real stores: every result it acks is recorded."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from common.config import StoreSettings
from tests.books import Expectation, assert_books
from tests.integration.results_helpers import publish_results, queued_jobs


def test_a_backlog_of_results_with_callbacks_is_recorded_whole(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    # A backlog larger than one gathered batch: results keep arriving while the
    # consumer publishes the callbacks of the batch before.
    job_ids = queued_jobs(engine, 400)
    publish_results(namespace, job_ids)
    expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    assert_books(engine, expected, timeout=30)


def test_no_execution_stays_queued_after_its_result_was_acked(
    namespace: StoreSettings, engine: Engine, results_consumer: None
) -> None:
    job_ids = queued_jobs(engine, 120)
    for start in range(0, len(job_ids), 10):
        publish_results(namespace, job_ids[start : start + 10])
    expected = Expectation(job_ids, execution_statuses={"SUCCEEDED"}, callbacks="recorded")
    books = assert_books(engine, expected, timeout=30)
    assert books.deliveries == 60
