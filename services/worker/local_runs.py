"""The runs this worker process has going, and the outcomes of those that just ended.

A delivery comes back to the same worker when the broker connection drops before its
ack: the run may still be going in this process (pool threads outlive a connection),
or may have ended with its result lost with the connection. The copy must then report
that run's outcome, not run again and not call it LOST.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future

from common.messages import ExecutionResult

# Ended runs are kept only until their result is stored in Redis (``forget``); the
# bound matters only while Redis is away.
KEEP_ENDED = 1_000


class LocalRuns:
    """Tracks runs by execution id; safe to use from many pool threads."""

    def __init__(self, keep_ended: int = KEEP_ENDED) -> None:
        self._lock = threading.Lock()
        # A run going has a future once a copy of its delivery waits for its outcome.
        self._going: dict[str, Future[ExecutionResult | None] | None] = {}
        self._ended: OrderedDict[str, ExecutionResult] = OrderedDict()
        self._keep = keep_ended

    def begin(self, execution_id: str) -> None:
        """A run of this execution starts in this process."""
        with self._lock:
            # No future until a copy waits for the run (``outcome``), which is rare: a
            # future per run was a lock and a condition made and dropped for each.
            self._going[execution_id] = None

    def end(self, execution_id: str, result: ExecutionResult | None) -> None:
        """The run ended with ``result`` (None: no result to report)."""
        with self._lock:
            going = self._going.pop(execution_id, None)
            if result is not None:
                self._ended[execution_id] = result
                while len(self._ended) > self._keep:
                    self._ended.popitem(last=False)
        if going is not None:
            going.set_result(result)

    def forget(self, execution_ids: list[str]) -> None:
        """Drop ended runs whose results are stored elsewhere now."""
        with self._lock:
            for execution_id in execution_ids:
                self._ended.pop(execution_id, None)

    def outcome(self, execution_id: str) -> ExecutionResult | None:
        """The outcome of this process's run of the execution, waiting while it goes on;
        None when this process has no such run (it ran in an earlier process)."""
        with self._lock:
            going = self._going.get(execution_id)
            if going is None and execution_id in self._going:
                going = self._going[execution_id] = Future()
            ended = self._ended.get(execution_id)
        if going is not None:
            return going.result()
        return ended
