"""The notifier's fair line on fakes: a callback that may not be attempted now waits
without a posting thread and without holding up the callbacks behind it; the next
attempt goes to the app furthest below its share, then by host; a job's callbacks go
one at a time, oldest first; a backlog past its bound is parked once the line is
full and that backlog stalls."""

from __future__ import annotations

from common.config import NotifierSettings
from common.messages import CallbackMessage
from services.notifier.fair_line import STALL_SECONDS, Backlog, FairLine
from services.notifier.host_limits import HostLimits
from services.notifier.main import line_backlog
from services.notifier.pending import PendingCallback, read_pending
from services.notifier.posting import PostOutcome
from services.notifier.scheduler import AttemptScheduler
from services.notifier.shares import AppShares, DeliveryShares, ShareKeys

WIDE = Backlog(app=1_000, host=1_000)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scheduler(slots: int = 4, app_share: int = 1, host_share: int = 4) -> AttemptScheduler:
    shares = DeliveryShares(AppShares(slots, app_share), AppShares(slots, host_share))
    return AttemptScheduler(slots, shares, HostLimits(slots, slow_seconds=1.0, slow_floor=2))


def callback(app: int, host: str, job: int | None = None, arrived: float = 0.0) -> PendingCallback:
    message = CallbackMessage(
        delivery_id=f"d-{app}-{host}-{job}", app_pk=app, url=f"http://{host}/hook", payload="{}"
    )
    message = message.model_copy(update={"job_id": job})
    return PendingCallback(
        message.model_dump_json().encode(), message, ShareKeys().of(message.url), arrived
    )


def fill(line: FairLine, units: list[PendingCallback]) -> None:
    for tag, unit in enumerate(units, start=1):
        line.add(tag, unit)


def apps_of(taken: list[tuple[int, PendingCallback]]) -> list[int]:
    return [unit.app_pk for _, unit in taken]


def test_another_apps_callbacks_go_past_a_backlog_that_arrived_first() -> None:
    line = FairLine(scheduler(slots=8, app_share=2), WIDE)
    fill(line, [callback(1, "slow.example") for _ in range(50)] + [callback(2, "fast.example")] * 3)
    assert apps_of(line.take(4)) == [1, 2, 1, 2], "each app in turn, not the first 4 in line"
    assert len(line) == 49


def test_a_callback_over_its_share_waits_without_a_slot_and_the_next_app_takes_it() -> None:
    plan = scheduler(slots=4, app_share=1)
    line = FairLine(plan, WIDE)
    fill(line, [callback(1, "slow.example") for _ in range(10)])
    hanging = line.take(4)
    assert apps_of(hanging) == [1, 1, 1], "app 1 leaves the last slot for the others"
    assert line.take(4) == [], "over its share it waits, and takes no slot"
    line.add(99, callback(2, "fast.example"))
    [(tag, unit)] = line.take(4)
    assert (tag, unit.app_pk, unit.park) == (99, 2, False)
    plan.finish(unit)
    line.add(100, callback(2, "fast.example"))
    assert apps_of(line.take(4)) == [2], "the slot freed goes to app 2, furthest below its share"
    assert len(line) == 7 and all(not u.park for _, u in hanging), "app 1 waits, unparked"


def test_hosts_of_one_app_take_turns() -> None:
    line = FairLine(scheduler(slots=8, app_share=8, host_share=8), WIDE)
    fill(line, [callback(1, "a.example")] * 5 + [callback(1, "b.example")] * 5)
    hosts = [unit.hosts.domain for _, unit in line.take(4)]
    assert hosts == ["a.example:80", "b.example:80"] * 2


def test_a_jobs_later_callback_waits_for_its_earlier_one_and_others_pass() -> None:
    plan = scheduler(slots=8, app_share=8, host_share=8)
    line = FairLine(plan, WIDE)
    first, second, other = callback(1, "h", job=7), callback(1, "h", job=7), callback(1, "h", job=8)
    fill(line, [first, second, other])
    taken = line.take(8)
    assert [u.job_id for _, u in taken] == [7, 8], "job 7's second waits for its first"
    plan.finish(taken[0][1])
    assert [u.job_id for _, u in line.take(8)] == [7]


def test_a_stalled_backlog_is_parked_past_its_bound_newest_first_then_at_arrival() -> None:
    clock = Clock()
    line = FairLine(scheduler(slots=4, app_share=1), Backlog(app=2, host=100), clock=clock)
    fill(line, [callback(1, "slow.example") for _ in range(8)])
    assert len(line.take(4)) == 3, "app 1 leaves the last slot for the others"
    clock.now = STALL_SECONDS - 1.0
    assert line.take(4) == [] and len(line) == 5, "a line stalled for less is not parked"
    clock.now = STALL_SECONDS
    parked = line.take(4)
    assert [(tag, unit.park) for tag, unit in parked] == [(8, True), (7, True), (6, True)]
    assert line.tags() == {4, 5}, "the oldest keep their places, up to the bound"
    line.add(9, callback(1, "slow.example", arrived=clock.now))
    assert [(tag, unit.park) for tag, unit in line.take(4)] == [(9, True)], "parked at once"


def test_a_burst_past_its_bound_waits_unparked_while_its_line_moves() -> None:
    """A fast receiver's burst: parked, it would wait the first retry delay for nothing."""
    clock = Clock()
    plan = scheduler(slots=4, app_share=4, host_share=4)
    line = FairLine(plan, Backlog(app=2, host=2), clock=clock)
    fill(line, [callback(1, "fast.example") for _ in range(8)])
    taken: list[tuple[int, PendingCallback]] = []
    for step in range(1, 41):
        clock.now = step * 0.5
        for n in range(4):
            line.add(100 * step + n, callback(1, "fast.example", arrived=clock.now))
        batch = line.take(4)
        for _, unit in batch:
            plan.finish(unit)
        taken += batch
    assert len(taken) == 160 and not [unit for _, unit in taken if unit.park]


def test_a_stalled_backlog_waits_unparked_while_the_line_has_room() -> None:
    """Room in the line: whatever else the queue holds still reaches it."""
    clock = Clock()
    line = FairLine(scheduler(slots=4, app_share=1), Backlog(app=2, host=100, full=10), clock=clock)
    fill(line, [callback(1, "slow.example") for _ in range(8)])
    line.take(4)
    clock.now = 5.0
    assert line.take(4) == [] and len(line) == 5
    for tag in range(20, 25):
        line.add(tag, callback(1, "slow.example", arrived=clock.now))
    clock.now = 6.0
    assert len([unit for _, unit in line.take(10) if unit.park]) == 8, "full: down to the bound"


def test_a_stream_of_parked_callbacks_never_keeps_the_line_from_its_attempts() -> None:
    clock = Clock()
    plan = scheduler(slots=2, app_share=2)
    line = FairLine(plan, Backlog(app=2, host=100), clock=clock)
    fill(line, [callback(1, "fast.example") for _ in range(12)])
    attempts = line.take(4)
    assert [unit.park for _, unit in attempts] == [False, False]
    clock.now = STALL_SECONDS
    assert [unit.park for _, unit in line.take(4)] == [True] * 4
    for _ in range(5):  # the parked come back from their delay while attempts go on
        line.add(99, callback(1, "fast.example", arrived=clock.now))
    assert [unit.park for _, unit in line.take(2)] == [True, True], "attempts all taken"
    plan.finish(attempts[0][1])
    assert [unit.park for _, unit in line.take(2)] == [False, True], "the attempt first"


def test_past_a_stalled_hosts_backlog_every_apps_callback_to_it_is_parked() -> None:
    clock = Clock()
    plan = scheduler(slots=8, app_share=8, host_share=8)
    probe = callback(1, "slow.example")
    for _ in range(4):
        plan.observe(probe, 15.0, PostOutcome(None, "no answer"))
    line = FairLine(plan, Backlog(app=100, host=2), clock=clock)
    fill(line, [callback(app, "slow.example") for app in (1, 2, 3, 3)])
    line.add(5, callback(3, "fast.example"))
    assert sorted(tag for tag, _ in line.take(8)) == [1, 5], "the slow host's limit is one"
    clock.now = STALL_SECONDS
    assert [(tag, unit.park) for tag, unit in line.take(8)] == [(4, True)]
    line.add(6, callback(2, "slow.example", arrived=clock.now))
    line.add(7, callback(2, "fast.example", arrived=clock.now))
    assert [(tag, unit.park) for tag, unit in line.take(8)] == [(7, False), (6, True)]


def test_a_callback_waiting_too_long_is_parked() -> None:
    clock = Clock()
    plan = scheduler(slots=4, app_share=1)
    line = FairLine(plan, WIDE, max_wait=300, clock=clock)
    fill(line, [callback(1, "h", arrived=0.0) for _ in range(5)])
    assert len(line.take(4)) == 3
    clock.now = 301.0
    parked = line.take(4)
    assert [unit.park for _, unit in parked] == [True, True], "parked, not attempted"
    assert len(line) == 0


def test_a_callback_that_cannot_be_read_goes_at_once() -> None:
    line = FairLine(scheduler(), WIDE)
    fill(line, [callback(1, "h")] * 3)
    line.add(9, read_pending(b"not json", ShareKeys()))
    assert 9 in [tag for tag, _ in line.take(8)], "in the same take as the attempts"


def test_callbacks_put_back_give_their_attempts_back_and_wait_first() -> None:
    plan = scheduler(slots=4, app_share=4)
    line = FairLine(plan, WIDE)
    fill(line, [callback(1, "h") for _ in range(6)])
    taken = line.take(4)
    assert plan.free == 0
    line.put_back(taken)
    assert plan.free == 4
    assert [tag for tag, _ in line.take(2)] == [1, 2]


def test_withdrawn_callbacks_leave_the_line_the_rest_keep_their_order() -> None:
    line = FairLine(scheduler(slots=8, app_share=8), WIDE)
    fill(line, [callback(1, "h") for _ in range(5)])
    rests = line.withdraw({2, 4})
    assert sorted(rests) == [2, 4] and line.tags() == {1, 3, 5}
    assert [tag for tag, _ in line.take(8)] == [1, 3, 5]


def test_a_failing_host_loses_half_its_limit_a_slow_one_one_and_quick_answers_restore_it() -> None:
    limits = HostLimits(ceiling=16, slow_seconds=1.0, slow_floor=4)
    for _ in range(3):
        limits.record("h", 15.0, failed=True)
    assert limits.limit_of("h") == 2
    limits.record("h", 2.0, failed=False)
    assert limits.limit_of("h") == 2, "a slow answer never raises a limit to the slow floor"
    for _ in range(200):
        limits.record("h", 0.01, failed=False)
    assert limits.limit_of("h") == 16
    for _ in range(20):
        limits.record("h", 2.0, failed=False)
    assert limits.limit_of("h") == 4, "slow answers take it down to the slow floor, no lower"
    assert limits.limit_of("other") == 16


def test_a_host_at_its_adaptive_limit_waits_while_other_hosts_go() -> None:
    plan = scheduler(slots=8, app_share=8, host_share=8)
    line = FairLine(plan, WIDE)
    probe = callback(1, "slow.example")
    for _ in range(4):
        plan.observe(probe, 15.0, PostOutcome(None, "no answer"))
    fill(line, [callback(1, "slow.example") for _ in range(5)] + [callback(1, "fast.example")] * 3)
    hosts = [unit.hosts.domain for _, unit in line.take(8)]
    assert hosts.count("slow.example:80") == 1, "its limit fell to one"
    assert hosts.count("fast.example:80") == 3
    [view] = [v for v in plan.hosts(set()) if v.host == "slow.example:80"]
    assert (view.in_flight, view.limit, view.failures) == (1, 1, 4)


def test_a_posted_attempt_frees_its_slot_and_shares_but_its_job_waits_for_its_record() -> None:
    """The POST ended: the next attempt to that app and host may start while this one's
    record is written, but the job's next callback waits until the record is."""
    attempts = scheduler(slots=1, app_share=1, host_share=1)
    first, same_job, other = (
        callback(1, "a.example", job=7),
        callback(1, "a.example", 7),
        callback(1, "a.example", 8),
    )
    assert attempts.try_start(first)
    assert not attempts.try_start(other), "one slot"
    attempts.posted(first)
    assert attempts.free == 1 and attempts.app_in_flight(1) == 0
    assert attempts.host_in_flight("a.example") == 0
    assert not attempts.try_start(same_job), "its job is still recording"
    assert attempts.try_start(other)
    attempts.finish(first, posted=True)
    assert attempts.free == 0, "finishing a posted attempt gives back its job alone"
    attempts.finish(other)
    assert attempts.try_start(same_job)


def test_callbacks_that_come_to_wait_are_handed_on_at_the_next_take_the_parked_not() -> None:
    handed: list[list[int | None]] = []
    clock = Clock()
    line = FairLine(
        scheduler(slots=4, app_share=1),
        Backlog(app=2, host=100),
        clock=clock,
        on_waiting=lambda units: handed.append([u.job_id for u in units]),
    )
    fill(line, [callback(1, "slow.example", job=n) for n in range(6)])
    line.take(4)
    assert handed == [[0, 1, 2, 3, 4, 5]], "all of them, before any is taken"
    clock.now = STALL_SECONDS
    line.take(4)
    line.add(7, callback(1, "slow.example", job=7, arrived=clock.now))  # parked at once
    line.add(8, callback(2, "other.example", job=8, arrived=clock.now))
    line.take(4)
    assert handed == [[0, 1, 2, 3, 4, 5], [8]]


def test_the_line_is_full_short_of_the_prefetch_by_what_the_attempts_hold() -> None:
    assert line_backlog(NotifierSettings()) == Backlog(app=400, host=400, full=900)
    small = NotifierSettings(held_callbacks=30, concurrency=16, app_backlog=5)
    assert line_backlog(small) == Backlog(app=5, host=400, full=0), "always full"
