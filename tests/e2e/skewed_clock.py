"""Run a ``kairos`` command as on a host whose wall clock is off.

``python -m tests.e2e.skewed_clock SECONDS ARGS...`` shifts this process's
``time.time()`` and ``time.time_ns()`` by SECONDS (negative: behind), then runs
``kairos ARGS`` in it. Only the wall clock moves: ``time.monotonic()`` is not a wall
clock and no host's skew changes it, and Redis and MySQL keep their own clocks, as the
cluster's would. Log lines carry the shifted time, which shows the skew took.
"""

from __future__ import annotations

import sys
import time


def skew_wall_clock(seconds: float) -> None:
    """Shift this process's wall clock by ``seconds`` from here on."""
    real_time, real_time_ns = time.time, time.time_ns
    offset_ns = int(seconds * 1_000_000_000)
    time.time = lambda: real_time() + seconds
    time.time_ns = lambda: real_time_ns() + offset_ns


def main() -> int:
    """Skew the clock by ``argv[1]`` seconds, then run ``kairos argv[2:]``."""
    skew_wall_clock(float(sys.argv[1]))
    # Imported only now, so that no module keeps a reference to the unshifted clock.
    from services.cli import main as kairos

    return kairos(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
