"""The claim thread's copy of the worker view: picks counted until a new view comes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from common.loadbalance import WorkerChooser, WorkerLoad
from services.dispatcher.main import Dispatcher
from services.dispatcher.trigger.claim_handover import ClaimSender


def workers() -> list[WorkerLoad]:
    return [WorkerLoad(w, 0, 0.0, 100.0, frozenset({"demo.noop"})) for w in ("w1", "w2")]


def test_picks_of_earlier_claims_count_until_the_dispatch_loop_reloads_the_view() -> None:
    sender = ClaimSender(WorkerChooser())
    view = workers()
    sender.workers = view
    chooser = WorkerChooser()
    first = sender.view.live()
    picks = [chooser.choose(first, "demo.noop") for _ in range(3)]
    assert [p.worker_id for p in picks if p] == ["w1", "w2", "w1"]
    # The next claim, same view: it goes on from the counts, w2 first.
    again = sender.view.live()
    assert again is first
    pick = chooser.choose(again, "demo.noop")
    assert pick is not None and pick.worker_id == "w2"
    assert [w.active for w in view] == [0, 0]  # the dispatch loop's objects untouched
    sender.workers = workers()  # reloaded: fresh counts from the directory
    assert [w.active for w in sender.view.live()] == [0, 0]


class Directory:
    def __init__(self) -> None:
        self.cached = workers()

    def live(self) -> list[WorkerLoad]:
        return self.cached  # the same list until a reload, as WorkerDirectory does


class Claims:
    handlers: frozenset[str] = frozenset()


def test_the_dispatch_loop_passes_the_same_view_until_its_directory_reloads() -> None:
    sender = ClaimSender(WorkerChooser())
    directory = Directory()
    leading = cast(Any, SimpleNamespace(directory=directory, sender=sender, claims=Claims()))
    Dispatcher._share_workers(leading)
    first = sender.view.live()
    Dispatcher._share_workers(leading)  # the next pass of the loop, no reload
    assert sender.view.live() is first
    directory.cached = workers()
    Dispatcher._share_workers(leading)
    assert sender.view.live() is not first
