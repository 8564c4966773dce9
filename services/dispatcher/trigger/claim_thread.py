"""Claiming due triggers in a thread of its own, while the dispatch loop fires.

A claim spends most of its time waiting for MySQL (a due scan, the compare-and-set
UPDATE, the executions INSERT, the commit), and so does a fire (row locks, the QUEUED
marks, the broker's commit): each in a thread of its own, the two waits overlap.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from common.runtime import backoff_seconds
from common.store_errors import STORE_LOST
from services.dispatcher.leadership.progress import LoopProgress
from services.dispatcher.trigger.claim import TriggerClaimer
from services.dispatcher.trigger.wake_thread import WakeListener

log = logging.getLogger(__name__)

# The claim loop's name among the loops whose progress keeps the lease.
CLAIM_LOOP = "claim"
# While it waits to try again after a failure, the loop says it is alive this often.
REST_SLICE_S = 0.25


class ClaimLoop:
    """Claims batches back to back while they come full, else on a wake-up or a timer.

    ``handlers`` is set by the dispatch loop (the worker view is not shared across
    threads). After every claim that found due jobs ``passes`` goes up and then
    ``claimed`` is set, so the dispatch loop sends the new executions, and holds those
    written SCHEDULED, at once.
    """

    def __init__(
        self,
        claimer: TriggerClaimer,
        wake: WakeListener,
        batch_size: int,
        scan_interval_s: float,
        progress: LoopProgress | None = None,
    ) -> None:
        self.handlers: frozenset[str] = frozenset()
        self.claimed = threading.Event()
        self.passes = 0
        self._claimer = claimer
        self._wake = wake
        self._batch_size = batch_size
        self._scan_interval_s = scan_interval_s
        self._thread: threading.Thread | None = None
        self._progress = progress or LoopProgress()
        self._failures = 0

    def start(self, keep_going: Callable[[], bool]) -> None:
        """Claim in the background for as long as ``keep_going()`` says."""
        self._thread = threading.Thread(
            target=self._run, args=(keep_going,), name="claim", daemon=True
        )
        self._thread.start()

    def join(self, timeout: float = 30.0) -> bool:
        """Wait up to ``timeout`` seconds for the thread to notice it should stop; True
        once it has (or never ran), False while it is still in a pass."""
        thread, self._thread = self._thread, None
        if thread is None:
            return True
        self._wake.event.set()
        thread.join(timeout=timeout)
        return not thread.is_alive()

    def _run(self, keep_going: Callable[[], bool]) -> None:
        try:
            while keep_going():
                self._progress.beat(CLAIM_LOOP)
                self._claim_once(keep_going)
        finally:
            self._progress.forget(CLAIM_LOOP)

    def _claim_once(self, keep_going: Callable[[], bool]) -> None:
        """One claim, then a wait for a wake-up (none after a full batch)."""
        try:
            found = self._claimer.claim(self.handlers, keep_going)
        except STORE_LOST as e:
            # MySQL restarting or a connection dropped: expected now and then.
            wait = self._failed()
            log.warning("claiming lost MySQL (%r); trying again in %.1f s", e, wait)
            self._rest(wait, keep_going)
            return
        except Exception:
            wait = self._failed()
            log.exception("claiming failed; trying again in %.1f s", wait)
            self._rest(wait, keep_going)
            return
        self._failures = 0
        self._progress.beat(CLAIM_LOOP)
        if found:
            self.passes += 1  # only this thread writes it
            self.claimed.set()
        if found < self._batch_size:
            self._wake.wait(self._scan_interval_s)

    def _failed(self) -> float:
        """Count a failure; how long to wait (jittered, so that dispatchers that lost
        MySQL together do not come back in step)."""
        self._failures += 1
        return backoff_seconds(self._failures)

    def _rest(self, seconds: float, keep_going: Callable[[], bool]) -> None:
        """Wait ``seconds`` (or until this dispatcher stops leading), saying all along
        that the loop is alive: waiting to try again is no stall."""
        deadline = time.monotonic() + seconds
        while keep_going() and (left := deadline - time.monotonic()) > 0:
            self._progress.beat(CLAIM_LOOP)
            time.sleep(min(left, REST_SLICE_S))
