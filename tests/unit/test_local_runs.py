"""The runs a worker process has going, and the outcomes of those that just ended."""

from __future__ import annotations

import threading

from common.messages import ExecutionResult
from services.worker.local_runs import LocalRuns


def _result(execution_id: str) -> ExecutionResult:
    return ExecutionResult.model_validate(
        {
            "execution_id": execution_id,
            "job_id": 1,
            "worker_id": "w-1",
            "status": "SUCCEEDED",
            "started_at": 1000,
            "ended_at": 2000,
        }
    )


def test_a_copy_waits_for_the_run_going_and_gets_its_outcome() -> None:
    runs = LocalRuns()
    runs.begin("ex-1")
    got: list[ExecutionResult | None] = []
    waiting = threading.Thread(target=lambda: got.append(runs.outcome("ex-1")))
    waiting.start()
    waiting.join(0.2)
    assert waiting.is_alive()  # the run is still going
    runs.end("ex-1", _result("ex-1"))
    waiting.join(5)
    assert got == [_result("ex-1")]


def test_several_copies_wait_for_one_run() -> None:
    runs = LocalRuns()
    runs.begin("ex-1")
    got: list[ExecutionResult | None] = []
    lock = threading.Lock()

    def wait() -> None:
        outcome = runs.outcome("ex-1")
        with lock:
            got.append(outcome)

    threads = [threading.Thread(target=wait) for _ in range(4)]
    for thread in threads:
        thread.start()
    runs.end("ex-1", _result("ex-1"))
    for thread in threads:
        thread.join(5)
    assert got == [_result("ex-1")] * 4


def test_an_ended_run_is_reported_until_forgotten() -> None:
    runs = LocalRuns()
    runs.begin("ex-1")
    runs.end("ex-1", _result("ex-1"))
    assert runs.outcome("ex-1") == _result("ex-1")
    runs.forget(["ex-1"])
    assert runs.outcome("ex-1") is None


def test_a_run_ending_without_a_result_gives_none_to_its_copy() -> None:
    runs = LocalRuns()
    runs.begin("ex-1")
    runs.end("ex-1", None)
    assert runs.outcome("ex-1") is None


def test_a_run_unknown_here_has_no_outcome() -> None:
    assert LocalRuns().outcome("ex-9") is None
