"""The worker heartbeat: load figures written to Redis and to the workers table."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import psutil

from common.consumer.stats import ConsumerStats
from common.db.workers import Heartbeat
from common.keys import WORKER_HELD, WORKER_HELD_AT, WORKER_INCARNATION
from common.states import WorkerState
from common.stores import Stores
from services.worker.fence import Fence
from services.worker.fence_watch import FenceWatch

log = logging.getLogger(__name__)

AVERAGE_WINDOW_SECONDS = 300.0
# How often the heartbeat looks whether it must go before its interval: the first runs
# have ended, or a run has outgrown the time last reported for its handler.
FIRST_RUN_POLL_S = 0.05
# A run has outgrown its handler's time once it has gone this many times as long, and
# this much longer (ms): quick runs that take a few ms more now and then are not news.
OUTGROWN_FACTOR = 2.0
OUTGROWN_MIN_MS = 50.0
# How many of a handler's latest runs say that it has grown slow (``handler_ms``).
RECENT_RUNS = 8
# The fewest seconds between two heartbeats sent early for outgrown runs.
EARLY_GAP_S = 0.5


def average_ms(stats: ConsumerStats, now: float, window: float = AVERAGE_WINDOW_SECONDS) -> int:
    """Mean run time, in ms, of the runs that finished within the window; at least 1
    when any did (0 says none did: the leader then bounds the worker's queue by what it
    measures, ``common.slots``)."""
    return _mean_ms(stats.durations, now, window)


def handler_ms(
    stats: ConsumerStats,
    now: float,
    window: float = AVERAGE_WINDOW_SECONDS,
    running: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """``average_ms`` of each handler's own runs (of its latest ones once they have
    outgrown that: ``_paced_ms``), or the time its runs going now have taken
    (``running``: seconds, by handler, as ``LoadSource.running_for`` gives it),
    whichever is longer; handlers with no run ended in the window are left out.

    The mean over the window moves slowly: after a stretch of quick runs, the same
    handler's runs grown slow (other params, a slow dependency) would be priced at
    their old time for minutes, and the leader would fill the queue with them. Runs
    going show their time before they end. A handler never timed stays out whatever it
    runs: the leader prices it at its whole horizon, which a run just begun would lower.
    """
    # A copy first: the consumer's thread adds handlers while the heartbeat reads.
    timed = {name: _paced_ms(runs, now, window) for name, runs in dict(stats.by_kind).items()}
    going = running or {}
    return {name: max(ms, int(going.get(name, 0.0) * 1000)) for name, ms in timed.items() if ms}


def _paced_ms(runs: Iterable[tuple[float, float]], now: float, window: float) -> int:
    """A handler's time: the mean of its runs in the window, or of its latest
    ``RECENT_RUNS`` once those have outgrown it.

    The runs going alone say too little: right after a turnover they have only just
    begun, and a handler grown slow would be priced at its old time between two
    turnovers, its runs sent by the hundred at that price. Its latest runs ended say it
    steadily. Only outgrown: noise among steady runs must not price a worker of one
    handler above its own average (two places a run, half its queue)."""
    recent = [(ended, seconds) for ended, seconds in list(runs) if now - ended <= window]
    ms = _mean_ms(recent, now, window)
    latest = _mean_ms(recent[-RECENT_RUNS:], now, window)
    return latest if _grown(latest, ms) else ms


def _grown(ms: float, before_ms: float) -> bool:
    """Whether ``ms`` is twice ``before_ms`` and 50 ms more: a handler's runs grown
    slow, not the noise of quick runs that take a few ms more now and then."""
    return ms >= max(OUTGROWN_FACTOR * before_ms, before_ms + OUTGROWN_MIN_MS)


def outgrown(reported: Mapping[str, int], running: Mapping[str, float]) -> bool:
    """Whether the runs going of a handler have outgrown the time last reported for it
    (``running`` as ``handler_ms`` takes it): the leader is pricing its runs far below
    what they take."""
    for name, seconds in running.items():
        ms = reported.get(name)
        if ms is not None and _grown(seconds * 1000, ms):
            return True
    return False


def _mean_ms(durations: Iterable[tuple[float, float]], now: float, window: float) -> int:
    recent = [seconds for ended, seconds in list(durations) if now - ended <= window]
    return max(1, int(sum(recent) / len(recent) * 1000)) if recent else 0


@dataclass(frozen=True)
class Load:
    """The runs holding a worker's slots: ``active`` counts ``overrun`` ones too."""

    active: int
    overrun: int


@dataclass(frozen=True)
class WorkerIdentity:
    """What a worker is: its id, how many runs it takes at once, which handlers it runs,
    and this process's incarnation (a worker restarted under the same id has a new one)."""

    worker_id: str
    capacity: int
    handlers: tuple[str, ...]
    incarnation: str = ""


def _ignore(*_args: object) -> None:
    return None


@dataclass(frozen=True)
class HeartbeatHooks:
    """What the heartbeat tells its worker: an operator asked it to drain and stop
    (``on_drain``), an operator's standing drain changed (``on_drained``), a heartbeat
    landed again after the fence closed (``on_reopen``)."""

    on_drain: Callable[[], None] = _ignore
    on_drained: Callable[[bool], None] = _ignore
    on_reopen: Callable[[], None] = _ignore


class LoadSource(Protocol):
    """Where the heartbeat reads the worker's load from (its serving loop)."""

    stats: ConsumerStats

    def load(self) -> Load:
        """The runs holding the worker's slots now."""

    def held(self) -> int:
        """Dispatch messages held unacked now."""

    def running_for(self, now: float) -> dict[str, float]:
        """Seconds the runs of each handler going now have gone (their lower median)."""


class Heartbeater:
    """Sends a heartbeat every ``interval`` seconds from its own thread.

    While no heartbeat lands, ``fence`` closes (``services/worker/fence.py``) and the
    worker starts no new run; ``on_reopen`` is called when one lands again. Each closing
    is logged once, whether the heartbeats fail or one hangs (``FenceWatch``).

    Each heartbeat also reads an operator's standing drain (``WorkerMarks.drain``) and
    hands each change to ``on_drained``; and it takes an operator's request to drain and
    stop (``WorkerMarks.request_stop``, from the console or the CLI) and hands it to
    ``on_drain``: the worker then drains and stops as on SIGTERM.
    """

    def __init__(
        self,
        identity: WorkerIdentity,
        source: LoadSource,
        stores: Stores,
        interval: float,
        hooks: HeartbeatHooks = HeartbeatHooks(),
        fence: Fence | None = None,
    ) -> None:
        self._worker_id = identity.worker_id
        self._capacity = identity.capacity
        self._handlers = identity.handlers
        self._source = source
        self._marks, self._workers = stores.worker_marks(), stores.workers()
        self._clock = stores.clock
        self._interval = interval
        self._on_drain = hooks.on_drain
        self.fence = fence if fence is not None else Fence(interval)
        self._on_reopen = hooks.on_reopen
        self._incarnation = identity.incarnation
        self._on_drained = hooks.on_drained
        self._drained = False
        # When the heartbeat being sent began (monotonic), None between heartbeats: a
        # closed fence with one still going is a hang, not a failure.
        self._sending_since: float | None = None
        self._watch = FenceWatch(self.fence, self._worker_id, self._blame)
        self._started_at = self._clock.now_ms()
        # The handler times the last heartbeat built carried (``outgrown`` reads them).
        self.reported_ms: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)
        self.state = WorkerState.ACTIVE
        psutil.cpu_percent(interval=None)

    def build(self) -> Heartbeat:
        """The heartbeat as of now."""
        load = self._source.load()
        now = time.monotonic()
        return Heartbeat(
            worker_id=self._worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            capacity=self._capacity,
            active=load.active,
            cpu_idle=int(100 - psutil.cpu_percent(interval=None)),
            avg_ms=average_ms(self._source.stats, now),
            handlers=self._handlers,
            state=self.state,
            started_at=self._started_at,
            sent_at=self._clock.now_ms(),
            overrun=load.overrun,
            handler_ms=handler_ms(self._source.stats, now, running=self._source.running_for(now)),
        )

    def send(self) -> None:
        """Write one heartbeat to Redis (expiring) and to MySQL."""
        self._sending_since = time.monotonic()
        try:
            self._send()
        finally:
            self._sending_since = None

    def _send(self) -> None:
        # The time is taken before the count: a reader that sees "nothing held" knows
        # this worker held nothing at some moment at or after ``held_at``.
        held_at = self._clock.now_ms()
        held: dict[str, str | int] = {
            WORKER_HELD: self._source.held(),
            WORKER_HELD_AT: held_at,
            WORKER_INCARNATION: self._incarnation,
        }
        heartbeat = self.build()
        self.reported_ms = dict(heartbeat.handler_ms)
        orders = self._marks.beat(
            self._worker_id, {**heartbeat.as_dict(), **held}, int(self._interval * 3000)
        )
        with self._workers.transaction() as workers:
            workers.upsert_heartbeat(heartbeat)
        self._landed()
        self._take_drained(orders.drained_by)
        if orders.stop_by is not None and self.state is WorkerState.ACTIVE:
            log.info(
                "drain requested by operator %s: finishing the runs going, then stopping",
                orders.stop_by,
                extra={"worker_id": self._worker_id},
            )
            self._on_drain()

    def _take_drained(self, drained_by: str | None) -> None:
        """Hand a standing drain set or lifted since the last heartbeat to ``on_drained``."""
        drained = drained_by is not None
        if drained == self._drained:
            return
        self._drained = drained
        if drained_by is not None:
            log.info(
                "drained by operator %s: taking no new work, finishing the runs going",
                drained_by,
                extra={"worker_id": self._worker_id},
            )
        else:
            log.info("undrained: taking work again", extra={"worker_id": self._worker_id})
        self._on_drained(drained)

    def _landed(self) -> None:
        # A closing the watch has not said yet is said before its reopening.
        self._watch.check()
        if self.fence.heard():
            log.warning(
                "heartbeat lands again: starting runs again", extra={"worker_id": self._worker_id}
            )
            self._on_reopen()

    def _blame(self) -> str:
        """Why no heartbeat lands, for the fence's log line."""
        since = self._sending_since
        if since is None:
            return "the last heartbeats failed"
        return (
            f"one has been waiting {time.monotonic() - since:.0f} s for Redis or MySQL to "
            "answer and is still waiting"
        )

    def start(self) -> None:
        """Send one heartbeat now, then keep sending in the background. A drain request
        left from before this process started is not this process's to take."""
        self._marks.forget_stop_request(self._worker_id)
        self.send()
        self._thread.start()
        self._watch.start()

    def stop(self, final_state: WorkerState) -> None:
        """Stop the loop and send a last heartbeat with ``final_state``."""
        self._stop.set()
        self._watch.stop()
        self._thread.join(timeout=self._interval + 5)
        self.state = final_state
        self.send()

    def _loop(self) -> None:
        due = time.monotonic() + self._interval
        timed = False
        early_after = 0.0
        while not self._stop.wait(FIRST_RUN_POLL_S):
            # Until a heartbeat has carried a timed run, the leader bounds this worker's
            # queue by what it measures (``common.slots``): the first runs' time is sent
            # as soon as they end, not an interval later. A run that outgrew its
            # handler's time is sent at once too (at most every ``EARLY_GAP_S``): until
            # then the leader queues that handler's runs here at their old price.
            now = time.monotonic()
            first_runs = not timed and bool(self._source.stats.durations)
            early = first_runs or (
                now >= early_after and outgrown(self.reported_ms, self._source.running_for(now))
            )
            if now < due and not early:
                continue
            if now < due:
                early_after = now + EARLY_GAP_S
            due = now + self._interval
            timed = timed or first_runs
            try:
                self.send()
            except Exception:
                log.exception("heartbeat failed; retrying at the next interval")
