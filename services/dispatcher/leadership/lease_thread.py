"""Keeps the dispatcher lease: acquires it when free, renews it while the leader's loops
make progress, and gives it up when one of them stalls."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

from services.dispatcher.leadership.lease import RedisLease
from services.dispatcher.leadership.progress import LoopProgress

log = logging.getLogger(__name__)

# What ``readiness`` says while this dispatcher leads, or stands by ready to lead.
READY = "ok"


def default_stall_ms(lease_ttl_ms: int) -> int:
    """Two thirds of the lease's lifetime: a stalled leader gives its lease up (and a
    standby takes it) before the lease would have run out had it stopped renewing."""
    return lease_ttl_ms * 2 // 3


class Leadership:
    """Tells whether this dispatcher holds the lease, and keeps it while it does.

    The lease only keeps dispatchers from racing; correctness comes from the version
    compare-and-set on each job, so a lease lost mid-batch cannot cause a double run.
    Renewal runs in its own thread, so it asks ``progress`` first: a leader whose loop
    has not finished a pass within ``stall_ms`` releases the lease and stops leading,
    and takes it again only once the loop is back.

    A dispatcher that has neither led nor been able to try for longer than the lease's
    lifetime (a loop still stalled, a lead that has not wound down) says so in
    ``readiness`` and in one log line, rather than standing by in silence.
    """

    def __init__(
        self,
        lease: RedisLease,
        progress: LoopProgress | None = None,
        stall_ms: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._lease = lease
        self._interval = lease.ttl_ms / 3000
        self._ttl_s = lease.ttl_ms / 1000
        self.progress = progress or LoopProgress(clock)
        self._stall_s = (stall_ms or default_stall_ms(lease.ttl_ms)) / 1000
        self._clock = clock
        self.is_leader = threading.Event()
        # Set while the process is ready to lead (its dispatch loop waits for the lease):
        # a process still winding down its last lead, or connecting for the next, takes
        # no lease it would then hold without dispatching.
        self.ready = threading.Event()
        self.ready.set()
        # Since when, and why, this dispatcher has neither led nor been able to try.
        self._unable: tuple[float, str] | None = None
        self._unable_told = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease", daemon=True)

    def start(self) -> None:
        """Start trying to acquire and renew in the background."""
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and release the lease so another dispatcher takes over at once."""
        self._stop.set()
        self._thread.join(timeout=self._interval + 2)
        if self.is_leader.is_set():
            self.is_leader.clear()
            self._release()

    def step_down(self, why: str) -> None:
        """Stop leading now and release the lease, so that a standby takes over at once
        (the dispatch loop cannot serve the lead, e.g. its broker connection failed)."""
        if self.is_leader.is_set():
            self.is_leader.clear()
            log.warning("%s; releasing the lease, stepping down", why)
            self._release()

    def readiness(self) -> str:
        """``ok`` while this dispatcher leads or can try to; else, once that has lasted
        longer than the lease's lifetime, why it can do neither (for ``/readyz``)."""
        unable = self._unable
        if self.is_leader.is_set() or unable is None:
            return READY
        since, why = unable
        age = self._clock() - since
        if age <= self._ttl_s:
            return READY
        return f"not leading, and cannot take the lease for {age:.0f} s: {why}"

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except redis.RedisError as e:
                if self.is_leader.is_set():
                    log.warning("lease renewal failed (%s); stepping down", e)
                self.is_leader.clear()
            except Exception:
                # The thread must outlive any one failure: without it this dispatcher
                # would never lead again.
                log.exception("the lease step failed; stepping down, trying again")
                self.is_leader.clear()
            self._stop.wait(self._interval)

    def _step(self) -> None:
        stalled = self.progress.stalled(self._stall_s)
        if self.is_leader.is_set():
            if stalled is not None:
                self.is_leader.clear()
                log.warning(
                    "the %s loop made no progress for %.1f s; releasing the lease, stepping down",
                    *stalled,
                )
                self._release()
            elif not self._lease.renew():
                self.is_leader.clear()
                log.warning("dispatcher lease lost; stepping down")
            return
        why = self._why_unable(stalled)
        self._note_unable(why)
        if why is None and self._lease.acquire():
            self.is_leader.set()
            log.info("dispatcher lease acquired; dispatching")

    def _why_unable(self, stalled: tuple[str, float] | None) -> str | None:
        """Why this dispatcher, not leading, cannot try for the lease now; None if it can."""
        if stalled is not None:
            loop, age = stalled
            return f"the {loop} loop of its last lead has made no progress for {age:.0f} s"
        if not self.ready.is_set():
            return (
                "the dispatch loop is not waiting for the lease (winding its last lead down, "
                "or waiting to try again after a failure)"
            )
        return None

    def _note_unable(self, why: str | None) -> None:
        """Keep since when this dispatcher cannot try; say so once past the lease's life."""
        if why is None:
            if self._unable_told:
                log.info("the dispatcher can lead again; trying for the lease")
            self._unable, self._unable_told = None, False
            return
        since = self._clock() if self._unable is None else self._unable[0]
        self._unable = (since, why)
        if not self._unable_told and self._clock() - since > self._ttl_s:
            self._unable_told = True
            log.warning("%s; this dispatcher cannot lead until it has (/readyz says so)", why)

    def _release(self) -> None:
        try:
            self._lease.release()
        except redis.RedisError:
            log.warning("could not release the lease; it expires by itself")
