"""Routing: ``Router.choose`` is the one choice of a worker, for the firer, the rescue
and the claims' hand-over alike."""

from __future__ import annotations

from dataclasses import replace

from common.db.executions_with_job import ExecutionWithJob
from common.loadbalance import Strategy, WorkerChooser, WorkerLoad
from services.dispatcher.routing.route import Router
from services.dispatcher.trigger.claim_handover import ClaimSender
from tests.unit.due_rows import due_row

NOOP = "demo.noop"


class View:
    """A directory with no live worker of its own: each test passes ``live``."""

    def live(self, fresh_for: float = 0.0) -> list[WorkerLoad]:
        return []


def workers() -> list[WorkerLoad]:
    return [
        WorkerLoad("w1", 1, 0.0, 100.0, frozenset({NOOP})),
        WorkerLoad("w2", 0, 0.0, 100.0, frozenset({NOOP}), room=1),
        WorkerLoad("w3", 0, 0.0, 100.0, frozenset({"demo.other"})),
    ]


def row(n: int) -> ExecutionWithJob:
    return due_row(n, recurring=False)


def test_choose_takes_the_least_loaded_worker_with_room_and_counts_the_pick() -> None:
    router = Router(View(), WorkerChooser())
    live = workers()
    assert router.choose(NOOP, live) == "w2"
    assert (live[1].active, live[1].room, live[1].picked) == (1, 0, 1)
    # w2 has no room left: w1 next, then w1 again, never w3, which does not run it.
    assert [router.choose(NOOP, live) for _ in range(2)] == ["w1", "w1"]


def test_choose_is_none_when_no_live_worker_runs_the_handler_or_has_room() -> None:
    router = Router(View(), WorkerChooser())
    live = [replace(w, room=0) for w in workers()]
    assert router.choose(NOOP, live) is None
    assert router.choose("demo.unknown", workers()) is None


def test_assign_is_the_choice_made_into_an_assignment() -> None:
    chosen = Router(View(), WorkerChooser(Strategy.ROUND_ROBIN))
    assigned = Router(View(), WorkerChooser(Strategy.ROUND_ROBIN))
    by_choice, by_assignment = workers(), workers()
    for n in range(4):
        assignment = assigned.assign(row(n), by_assignment)
        expected = chosen.choose(NOOP, by_choice)
        assert (assignment.worker_id if assignment else None) == expected
        assert assignment is None or assignment.execution_key == n


def test_the_claim_sender_routes_through_a_router_on_its_own_copy_of_the_view() -> None:
    sender = ClaimSender(WorkerChooser())
    view = workers()
    sender.workers = view
    live = sender.view.live()
    assert sender._router.directory is sender.view
    assert sender._router.choose(NOOP, live) == "w2"
    assert [w.picked for w in view] == [0, 0, 0]  # the dispatch loop's view untouched
