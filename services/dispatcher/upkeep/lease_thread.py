"""Keeps the dispatcher lease: acquires it when free, renews it from a watchdog thread."""

from __future__ import annotations

import logging
import threading

import redis

from common.lease import RedisLease

log = logging.getLogger(__name__)


class Leadership:
    """Tells whether this dispatcher holds the lease, and keeps it while it does.

    The lease only keeps dispatchers from racing; correctness comes from the version
    compare-and-set on each job, so a lease lost mid-batch cannot cause a double run.
    """

    def __init__(self, lease: RedisLease) -> None:
        self._lease = lease
        self._interval = lease.ttl_ms / 3000
        self.is_leader = threading.Event()
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
            try:
                self._lease.release()
            except redis.RedisError:
                log.warning("could not release the lease; it expires by itself")

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
        if self.is_leader.is_set():
            if not self._lease.renew():
                self.is_leader.clear()
                log.warning("dispatcher lease lost; stepping down")
        elif self._lease.acquire():
            self.is_leader.set()
            log.info("dispatcher lease acquired; dispatching")
