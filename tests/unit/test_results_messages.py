"""Packing finished executions into results messages."""

from __future__ import annotations

from common.messages import ExecutionResult, ResultBatch
from common.result_messages import results_messages, written_results_message
from common.topology import RESULTS_EXCHANGE, RESULTS_QUEUE


def _result(execution_id: str, status: str = "SUCCEEDED") -> ExecutionResult:
    return ExecutionResult.model_validate(
        {
            "execution_id": execution_id,
            "job_id": 1,
            "worker_id": "w-1",
            "status": status,
            "started_at": 1000,
            "ended_at": 2000,
        }
    )


def test_results_finished_together_go_in_one_message() -> None:
    outcomes = [_result("ex-1"), None, _result("ex-2", "FAILED"), None, _result("ex-3", "LOST")]
    messages = results_messages("w-1", outcomes)
    assert len(messages) == 1
    batch = ResultBatch.model_validate_json(messages[0].body)
    assert batch == ResultBatch(
        worker_id="w-1",
        results=[_result("ex-1"), _result("ex-2", "FAILED"), _result("ex-3", "LOST")],
    )


def test_results_message_goes_to_the_results_queue() -> None:
    (message,) = results_messages("w-1", [_result("ex-1")])
    assert (message.exchange, message.routing_key) == (RESULTS_EXCHANGE, RESULTS_QUEUE)


def test_results_message_is_named_after_its_first_result() -> None:
    (message,) = results_messages("w-1", [None, _result("ex-7"), _result("ex-8")])
    assert message.message_id == "ex-7"


def test_all_none_gives_no_message() -> None:
    assert results_messages("w-1", [None, None]) == []


def test_no_outcomes_give_no_message() -> None:
    assert results_messages("w-1", []) == []


def test_written_results_make_the_same_message() -> None:
    results = [_result("ex-1"), _result("ex-2", "FAILED"), _result("ex-3", "LOST")]
    written = [(r.execution_id, r.model_dump_json()) for r in results]
    message = written_results_message("w-1", written)
    (expected,) = results_messages("w-1", results)
    assert message == expected


def test_written_results_keep_an_unusual_worker_id() -> None:
    worker_id = 'wörker "7"\\\u2028'
    result = _result("ex-1").model_copy(update={"worker_id": worker_id})
    message = written_results_message(worker_id, [("ex-1", result.model_dump_json())])
    batch = ResultBatch.model_validate_json(message.body)
    assert batch == ResultBatch(worker_id=worker_id, results=[result])
    assert message.message_id == "ex-1"
