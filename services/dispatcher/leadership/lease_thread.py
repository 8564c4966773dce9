"""Keeps the dispatcher lease: acquires it when free, renews it while the leader's loops
make progress, and gives it up when one of them stalls."""

from __future__ import annotations

import logging
import threading

import redis

from services.dispatcher.leadership.lease import RedisLease
from services.dispatcher.leadership.progress import LoopProgress

log = logging.getLogger(__name__)


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
    """

    def __init__(
        self,
        lease: RedisLease,
        progress: LoopProgress | None = None,
        stall_ms: int | None = None,
    ) -> None:
        self._lease = lease
        self._interval = lease.ttl_ms / 3000
        self.progress = progress or LoopProgress()
        self._stall_s = (stall_ms or default_stall_ms(lease.ttl_ms)) / 1000
        self.is_leader = threading.Event()
        # Set while the process is ready to lead (its dispatch loop waits for the lease):
        # a process still winding down its last lead, or connecting for the next, takes
        # no lease it would then hold without dispatching.
        self.ready = threading.Event()
        self.ready.set()
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

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except redis.RedisError as e:
                if self.is_leader.is_set():
                    log.warning("lease renewal failed (%s); stepping down", e)
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
        elif stalled is None and self.ready.is_set() and self._lease.acquire():
            self.is_leader.set()
            log.info("dispatcher lease acquired; dispatching")

    def _release(self) -> None:
        try:
            self._lease.release()
        except redis.RedisError:
            log.warning("could not release the lease; it expires by itself")
