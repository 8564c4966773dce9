"""Handler runs past their timeout whose thread has not ended: each still holds a slot.

Python cannot stop a thread, so a plain handler that times out keeps running after its
run is reported TIMED_OUT. The worker counts such runs against its capacity until their
thread ends, so it never runs more handlers at once than its slots, and reports them in
its heartbeat and in ``kairos_worker_overrunning_runs``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from common.metrics import observe_overruns
from services.worker.calling import HandlerCall

log = logging.getLogger(__name__)


class Overruns:
    """The timed-out runs of one worker process still going; safe from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[HandlerCall] = set()
        self._listeners: list[Callable[[], object]] = []

    @property
    def count(self) -> int:
        """How many timed-out runs still hold a slot."""
        with self._lock:
            return len(self._held)

    def on_release(self, listener: Callable[[], object]) -> None:
        """Call ``listener()`` (from the ended run's thread) each time a slot is freed."""
        self._listeners.append(listener)

    def hold(self, call: HandlerCall) -> bool:
        """Count ``call`` until its thread ends; False, counting nothing, if it has ended."""
        with self._lock:
            self._held.add(call)  # before the hook: its release must find it here
        if not call.hold_if_running(self._release):
            with self._lock:
                self._held.discard(call)
            return False
        observe_overruns(self.count)
        return True

    def _release(self, call: HandlerCall) -> None:
        with self._lock:
            self._held.discard(call)
        observe_overruns(self.count)
        log.info(
            "a handler that passed its timeout ended after %.1f s; its slot is free again",
            time.monotonic() - call.started,
            extra={"job_id": call.context.job_id, "execution_id": call.context.execution_id},
        )
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("could not hand a freed slot back")
