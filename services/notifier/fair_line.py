"""The notifier's waiting line: callbacks wait per app and per receiving host, and the
next free attempt goes to the app furthest below its share, then to its host with the
fewest attempts going.

A callback whose app or host may not have another attempt now (``AttemptScheduler``)
waits here without an attempt slot, and the callbacks behind it go first: a slow
receiver's backlog never holds up another app's callbacks, or another host's. Messages
stay unacked while they wait; a delivery is acked once its attempt is recorded.

The notifier holds many messages (a large prefetch) so that other apps' callbacks reach
the line while one host's backlog waits. A burst past an app's ``app_backlog`` or a
host's ``host_backlog`` still waits here, in turn, as long as its line moves: parked
through the first retry delay, a fast receiver's burst would wait seconds for nothing.
Only when the line is full (``Backlog.full``: the prefetch is nearly used, so whatever
else the queue holds cannot reach the line) and an app's or host's oldest waiting
callback has waited ``STALL_SECONDS`` is its backlog past the bound parked (through the
first retry delay without an attempt, back to the queue's end), newest first; while it
stays past its bound its next arrivals are parked at once, so the queue behind it flows
to the line. A callback that waited ``max_wait`` seconds is parked too (a host that
fails every attempt, its limit down to one): RabbitMQ closes a channel that keeps a
delivery unacked past its consumer timeout (30 minutes by default).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from itertools import count

from services.notifier.pending import PendingCallback
from services.notifier.scheduler import AttemptScheduler

Entry = tuple[int, PendingCallback]

# How long a callback waits in the line at most before it is parked; how often that is
# looked at.
MAX_WAIT_SECONDS = 300.0
SWEEP_SECONDS = 1.0
# A backlog past its bound whose oldest callback waited this long while the line is full
# is parked: a line that moves slower than this drains a full prefetch more slowly than
# the first retry delay would bring the parked back.
STALL_SECONDS = 2.0
# How far into one app's line to one host a job's later callbacks are looked past, when
# the job's earlier one is being attempted.
SCAN_DEPTH = 16


@dataclass(frozen=True)
class Backlog:
    """How many callbacks of one app, or to one host, may wait in the line when it is
    full and that app's or host's line stalls; past either, the rest is parked.

    ``full``: the line is full with this many callbacks waiting (the notifier's
    prefetch less what its attempts hold); 0, always.
    """

    app: int
    host: int
    full: int = 0


class FairLine:
    """A ``WaitingLine`` of pending callbacks for one consumer (its delivery tags).

    ``on_waiting``, when given, is handed the callbacks that came to wait in the line
    since the last ``take``, at its start (the deliverer reads their rows ahead)."""

    def __init__(
        self,
        scheduler: AttemptScheduler,
        backlog: Backlog,
        max_wait: float = MAX_WAIT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        on_waiting: Callable[[list[PendingCallback]], object] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._on_waiting = on_waiting
        # Callbacks that came to wait since the last ``take``, for ``on_waiting``.
        self._arrived: list[PendingCallback] = []
        self._backlog = backlog
        self._max_wait = max_wait
        self._clock = clock
        self._swept = clock()
        self._queues: dict[int, dict[str, deque[Entry]]] = {}
        # Units that go without an attempt (parked or unreadable): first out.
        self._quick: deque[Entry] = deque()
        self._by_app: Counter[int] = Counter()
        self._by_host: Counter[str] = Counter()
        self._served: dict[Hashable, int] = {}
        self._turns = count(1)
        # Apps and hosts whose backlog was parked, while it stays past its bound: their
        # next arrivals past it are parked at once.
        self._stalled_apps: set[int] = set()
        self._stalled_hosts: set[str] = set()

    def __len__(self) -> int:
        """How many callbacks wait."""
        return len(self._quick) + sum(self._by_app.values())

    def waiting_by_app(self) -> dict[int, int]:
        """Callbacks waiting for an attempt, by app."""
        return dict(self._by_app)

    def waiting_by_host(self) -> dict[str, int]:
        """Callbacks waiting for an attempt, by host."""
        return dict(self._by_host)

    def add(self, tag: int, unit: PendingCallback) -> None:
        """The callback waits with its app's and host's others, or is parked (its app's
        or host's stalled backlog is past its bound)."""
        if unit.goes_at_once:
            self._quick.append((tag, unit))
        elif self._parks_at_once(unit):
            self._quick.append((tag, replace(unit, park=True)))
        else:
            self._enqueue((tag, unit), last=True)
            if self._on_waiting is not None:
                self._arrived.append(unit)

    def _parks_at_once(self, unit: PendingCallback) -> bool:
        app, host = unit.app_pk, unit.hosts.domain
        return (app in self._stalled_apps and self._by_app[app] >= self._backlog.app) or (
            host in self._stalled_hosts and self._by_host[host] >= self._backlog.host
        )

    def _enqueue(self, entry: Entry, last: bool) -> None:
        unit = entry[1]
        hosts = self._queues.setdefault(unit.app_pk, {})
        queue = hosts.setdefault(unit.hosts.domain, deque())
        if last:
            queue.append(entry)
        else:
            queue.appendleft(entry)
        self._by_app[unit.app_pk] += 1
        self._by_host[unit.hosts.domain] += 1

    def take(self, slots: int) -> list[Entry]:
        """Up to ``slots`` callbacks to run now: attempts, each counted as started with
        the scheduler, then the parked and unreadable in the slots left.

        Attempts first: parked callbacks come back from their delay as fast as a burst
        past the backlog parks them, so served first they would take every slot, and the
        line they were parked to make room for would never be attempted. The consumer
        has run slots beyond the scheduler's attempts, so the parked still go while
        every attempt is taken.
        """
        if self._arrived and self._on_waiting is not None:
            arrived, self._arrived = self._arrived, []
            self._on_waiting(arrived)
        self._sweep()
        taken: list[Entry] = []
        while len(taken) < slots:
            picked = self._pick()
            if picked is None:
                break
            taken.append(picked)
        while len(taken) < slots and self._quick:
            taken.append(self._quick.popleft())
        return taken

    def _sweep(self) -> None:
        """Park what waited too long, and stalled backlogs (looked at once a second)."""
        now = self._clock()
        if now - self._swept < SWEEP_SECONDS:
            return
        self._swept = now
        self._park_overdue(now)
        self._park_stalled(now)

    def _park_overdue(self, now: float) -> None:
        """Park the callbacks that waited ``max_wait``."""
        for app, hosts in list(self._queues.items()):
            for host, queue in list(hosts.items()):
                while queue and now - queue[0][1].arrived >= self._max_wait:
                    tag, unit = queue.popleft()
                    self._quick.append((tag, replace(unit, park=True)))
                    self._leave(app, host)

    def _park_stalled(self, now: float) -> None:
        """While the line is full, park the newest callbacks past the bound of each app
        and host whose oldest waited ``STALL_SECONDS``."""
        bound = self._backlog
        self._stalled_apps = {a for a in self._stalled_apps if self._by_app[a] >= bound.app}
        self._stalled_hosts = {h for h in self._stalled_hosts if self._by_host[h] >= bound.host}
        if len(self) < bound.full:
            return
        for app, waiting in list(self._by_app.items()):
            lines = list(self._queues[app].values())
            if waiting > bound.app and self._stalled(lines, now):
                self._stalled_apps.add(app)
                self._park_newest(lines, waiting - bound.app)
        for host, waiting in list(self._by_host.items()):
            lines = [hosts[host] for hosts in self._queues.values() if host in hosts]
            if waiting > bound.host and self._stalled(lines, now):
                self._stalled_hosts.add(host)
                self._park_newest(lines, waiting - bound.host)

    @staticmethod
    def _stalled(lines: list[deque[Entry]], now: float) -> bool:
        oldest = min(line[0][1].arrived for line in lines if line)
        return now - oldest >= STALL_SECONDS

    def _park_newest(self, lines: list[deque[Entry]], excess: int) -> None:
        """Park ``excess`` callbacks from the ends of these lines, longest line first."""
        for _ in range(excess):
            longest = max(lines, key=len)
            tag, unit = longest.pop()
            self._quick.append((tag, replace(unit, park=True)))
            self._leave(unit.app_pk, unit.hosts.domain)

    def _pick(self) -> Entry | None:
        """The next attempt: the app with the fewest attempts going (the longest since
        served among equals), then its host likewise, whose first callback may start."""
        scheduler = self._scheduler
        if scheduler.free <= 0:
            return None
        for app in sorted(self._queues, key=lambda a: (scheduler.app_in_flight(a), self._turn(a))):
            hosts = self._queues[app]
            order = sorted(hosts, key=lambda h: (scheduler.host_in_flight(h), self._turn(h)))
            for host in order:
                found = self._first_startable(hosts[host])
                if found is not None:
                    self._taken(app, host)
                    return found
        return None

    def _turn(self, key: Hashable) -> int:
        return self._served.get(key, 0)

    def _first_startable(self, queue: deque[Entry]) -> Entry | None:
        """The first callback of one app's line to one host that may start, counted as
        started; a job's later callbacks wait behind its earlier one."""
        held_back: set[int] = set()
        for index, entry in enumerate(queue):
            if index >= SCAN_DEPTH:
                return None
            job = entry[1].job_id
            if job is not None and (job in held_back or self._scheduler.job_in_flight(job)):
                held_back.add(job)
                continue
            if not self._scheduler.try_start(entry[1]):
                return None  # its app or host is at its share: so is the rest of this line
            del queue[index]
            return entry
        return None

    def _taken(self, app: int, host: str) -> None:
        self._leave(app, host)
        turn = next(self._turns)
        self._served[app] = self._served[host] = turn
        if len(self._served) > 10_000:
            self._served.clear()

    def _leave(self, app: int, host: str) -> None:
        """One callback of ``app`` to ``host`` left its line."""
        self._by_app[app] -= 1
        self._by_host[host] -= 1
        if self._by_app[app] <= 0:
            del self._by_app[app]
        if self._by_host[host] <= 0:
            del self._by_host[host]
        hosts = self._queues[app]
        if not hosts[host]:
            del hosts[host]
        if not hosts:
            del self._queues[app]

    def put_back(self, batch: Sequence[Entry]) -> None:
        """Callbacks ``take`` gave, unstarted: their attempts are given back and they
        wait again at the head of their lines."""
        for entry in reversed(batch):
            unit = entry[1]
            if unit.goes_at_once:
                self._quick.appendleft(entry)
            else:
                self._scheduler.finish(unit)
                self._enqueue(entry, last=False)

    def tags(self) -> set[int]:
        """The deliveries whose callbacks wait."""
        return {tag for tag, _ in self._entries()}

    def _entries(self) -> list[Entry]:
        found = list(self._quick)
        for hosts in self._queues.values():
            for queue in hosts.values():
                found += queue
        return found

    def withdraw(self, tags: set[int]) -> dict[int, list[PendingCallback]]:
        """Take the waiting callbacks of these deliveries out of the line."""
        rests: dict[int, list[PendingCallback]] = {}
        kept = [entry for entry in self._entries() if entry[0] not in tags]
        for tag, unit in self._entries():
            if tag in tags:
                rests.setdefault(tag, []).append(unit)
        self._quick.clear()
        self._queues.clear()
        self._by_app.clear()
        self._by_host.clear()
        for entry in kept:
            if entry[1].goes_at_once:
                self._quick.append(entry)
            else:
                self._enqueue(entry, last=True)
        return rests
