"""The notifier's line on its event loop, on fakes: when a POST ends the next attempt
starts on the loop itself, with no hop to another thread; the apps' shares, the line's
order and a job's one-at-a-time hold there as in the line; a stopping consumer's
waiting callbacks go back to the queue, and every callback is settled exactly once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from common.topology import CALLBACKS_QUEUE
from services.notifier.delivery import Attempt
from services.notifier.fair_line import Backlog, FairLine
from services.notifier.loop_line import LineHooks, LoopLine, Outcome
from services.notifier.pending import PendingCallback
from services.notifier.scheduler import AttemptScheduler
from tests.unit.test_notifier_fair_line import callback, scheduler

WIDE = Backlog(app=1_000, host=1_000)


class FakeAttempts:
    """Attempts whose POSTs and records end when the test says (or at once, ``auto``),
    started through a ``LoopLine`` as the notifier's deliverer starts them."""

    def __init__(self, plan: AttemptScheduler, loop: asyncio.AbstractEventLoop, auto: bool) -> None:
        self.plan = plan
        self.loop = loop
        self.auto = auto
        self.hops = 0
        self.started: list[PendingCallback] = []
        self.threads: set[int] = set()
        self.most_by_app: dict[int, int] = {}
        self.posts: dict[str, asyncio.Future[None]] = {}
        self.records: dict[str, asyncio.Future[None]] = {}
        self.line = LoopLine(FairLine(plan, WIDE), LineHooks(self.hop, self.attempt, self.settle))

    def hop(self, work: Coroutine[Any, Any, None]) -> None:
        self.hops += 1
        asyncio.run_coroutine_threadsafe(work, self.loop)

    def settle(self, unit: PendingCallback) -> Attempt:
        return Attempt(False, None)

    async def attempt(self, unit: PendingCallback) -> Outcome:
        assert unit.message is not None
        key = unit.message.delivery_id
        self.threads.add(threading.get_ident())
        self.started.append(unit)
        going = self.plan.app_in_flight(unit.app_pk)
        self.most_by_app[unit.app_pk] = max(self.most_by_app.get(unit.app_pk, 0), going)
        if not self.auto:
            await self.posts.setdefault(key, self.loop.create_future())
        self.plan.posted(unit)
        self.line.pump()  # the deliverer's ``on_posted``
        if not self.auto:
            await self.records.setdefault(key, self.loop.create_future())
        self.plan.finish(unit, posted=True)
        return Attempt(True, None)

    def end_post(self, unit: PendingCallback) -> None:
        assert unit.message is not None
        self.posts.setdefault(unit.message.delivery_id, self.loop.create_future()).set_result(None)

    def end_record(self, unit: PendingCallback) -> None:
        assert unit.message is not None
        key = unit.message.delivery_id
        self.records.setdefault(key, self.loop.create_future()).set_result(None)


def numbered(app: int, host: str, n: int, job: int | None = None) -> PendingCallback:
    unit = callback(app, host, job)
    assert unit.message is not None
    message = unit.message.model_copy(update={"delivery_id": f"{app}-{host}-{n}"})
    return replace(unit, message=message, body=message.model_dump_json().encode())


def sent_to(future: Future[Outcome]) -> tuple[str, bytes]:
    """Where a settled callback's message went next, and its body."""
    outcome = future.result()
    assert outcome is not None and outcome.follow_up is not None
    return outcome.follow_up.routing_key, outcome.follow_up.body


async def settle_loop() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def start_from_a_thread(
    fakes: FakeAttempts, units: list[PendingCallback]
) -> list[Future[Outcome]]:
    """Start the units from another thread, as the consumer's connection thread does."""
    futures = await asyncio.to_thread(lambda: [fakes.line.start(u) for u in units])
    await settle_loop()
    return futures


def test_when_a_post_ends_the_next_attempt_starts_on_the_loop_without_a_hop() -> None:
    async def scenario() -> None:
        fakes = FakeAttempts(scheduler(slots=4, app_share=4), asyncio.get_running_loop(), False)
        units = [numbered(1, "fast.example", n) for n in range(10)]
        futures = await start_from_a_thread(fakes, units)
        assert fakes.started == units[:4] and len(fakes.line) == 6
        hops = fakes.hops
        fakes.end_post(units[0])
        await settle_loop()  # the loop alone: its POST ended, the next attempt's task ran
        assert fakes.started == units[:5], "the next attempt started as the POST ended"
        assert fakes.hops == hops, "no hop to another thread and back"
        assert fakes.threads == {threading.get_ident()}, "every attempt ran on the loop"
        assert not futures[0].done(), "its future ends with its record, not its POST"
        fakes.end_record(units[0])
        await settle_loop()
        assert futures[0].result() == Attempt(True, None)

    asyncio.run(scenario())


def test_the_shares_and_the_order_hold_on_the_loop() -> None:
    async def scenario() -> None:
        fakes = FakeAttempts(scheduler(slots=4, app_share=3), asyncio.get_running_loop(), False)
        first = [numbered(1, "slow.example", n) for n in range(10)]
        later = [numbered(2, "fast.example", n) for n in range(2)]
        await start_from_a_thread(fakes, first + later)
        assert [u.app_pk for u in fakes.started] == [1, 2, 1, 2], "each app in turn"
        fakes.end_post(later[0])
        await settle_loop()
        assert fakes.started[-1] == first[2], "app 2 is through: its place goes to app 1"
        for unit in first[:3]:
            fakes.end_post(unit)
            await settle_loop()
        assert fakes.started[4:] == first[2:6], "app 1's in its order"
        assert fakes.most_by_app == {1: 3, 2: 2}, "app 1 never past its share of 3"

    asyncio.run(scenario())


def test_a_jobs_later_callback_starts_once_the_earlier_ones_record_is_written() -> None:
    async def scenario() -> None:
        fakes = FakeAttempts(scheduler(slots=4, app_share=4), asyncio.get_running_loop(), False)
        earlier, later = numbered(1, "h.example", 1, job=7), numbered(1, "h.example", 2, job=7)
        await start_from_a_thread(fakes, [earlier, later])
        fakes.end_post(earlier)
        await settle_loop()
        assert fakes.started == [earlier], "the job's next waits while the first is recorded"
        fakes.end_record(earlier)
        await settle_loop()
        assert fakes.started == [earlier, later]

    asyncio.run(scenario())


def test_stopping_hands_the_waiting_back_and_lets_the_running_end() -> None:
    async def scenario() -> None:
        fakes = FakeAttempts(scheduler(slots=4, app_share=4), asyncio.get_running_loop(), False)
        units = [numbered(1, "h.example", n) for n in range(6)]
        futures = await start_from_a_thread(fakes, units)
        fakes.line.give_back()
        await settle_loop()
        for unit, future in zip(units[4:], futures[4:], strict=True):
            assert sent_to(future) == (CALLBACKS_QUEUE, unit.body)
        assert not any(f.done() for f in futures[:4]), "the running go on"
        late = fakes.line.start(numbered(1, "h.example", 9))
        assert sent_to(late)[0] == CALLBACKS_QUEUE, "arriving late: back"
        for unit in units[:4]:
            fakes.end_post(unit)
            fakes.end_record(unit)
        await settle_loop()
        assert [f.result() for f in futures[:4]] == [Attempt(True, None)] * 4
        assert len(fakes.started) == 4 and len(fakes.line) == 0

    asyncio.run(scenario())


def test_a_parked_callback_settles_at_once_without_the_loop() -> None:
    async def scenario() -> None:
        fakes = FakeAttempts(scheduler(), asyncio.get_running_loop(), False)
        parked = replace(numbered(1, "h.example", 1), park=True)
        assert fakes.line.start(parked).result() == Attempt(False, None)
        assert fakes.hops == 0 and fakes.started == []

    asyncio.run(scenario())


def test_a_burst_of_several_apps_settles_every_callback_once_and_frees_every_place() -> None:
    async def scenario() -> None:
        plan = scheduler(slots=16, app_share=4, host_share=8)
        fakes = FakeAttempts(plan, asyncio.get_running_loop(), auto=True)
        # The apps' callbacks come interleaved, as a burst of several apps does: the
        # loop may take the first arrivals before the thread has started the rest,
        # and an app alone in the line may use the slots the others leave free.
        units = [
            numbered(app, f"h{n % 3}.example", n, job=n % 50 + 100 * app)
            for n in range(300)
            for app in (1, 2, 3)
        ]
        futures = await start_from_a_thread(fakes, units)
        for _ in range(200):
            if all(f.done() for f in futures):
                break
            await asyncio.sleep(0.01)
        assert [f.result() for f in futures] == [Attempt(True, None)] * len(units)
        ids = [u.message.delivery_id for u in fakes.started if u.message is not None]
        assert sorted(ids) == sorted(u.message.delivery_id for u in units if u.message)
        assert len(set(ids)) == len(units), "each attempted once"
        assert plan.free == 16 and plan.apps_in_flight() == {}, "every place given back"
        assert max(fakes.most_by_app.values()) <= 4 and len(fakes.line) == 0

    asyncio.run(scenario())
