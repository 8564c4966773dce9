"""What run log capture adds to a run whose handler logs nothing, in one process.

Times ``call_handler`` on ``demo.noop`` N times as the worker called it before run logs
(no run log) and as it calls it now (a run log opened, bound in the thread, finished),
interleaved in rounds so both see the same machine; prints microseconds per run.

    .venv/bin/python bench/run_log_overhead.py --runs 200000

The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from collections.abc import Sequence

from services.worker.calling import call_handler
from services.worker.demo import noop
from services.worker.log_writer import RunLogWriter
from services.worker.registry import HandlerContext
from services.worker.run_logs import LogLine, install_capture


def _discard(lines: Sequence[LogLine]) -> None:
    raise AssertionError(f"a handler that logs nothing stored {len(lines)} lines")


def without_capture(runs: int) -> float:
    """Seconds for ``runs`` calls as before run logs."""
    began = time.perf_counter()
    for n in range(runs):
        call_handler(noop, {}, HandlerContext(1, str(n), 1, 0), None)
    return time.perf_counter() - began


def with_capture(runs: int, writer: RunLogWriter) -> float:
    """Seconds for ``runs`` calls as the worker makes them now."""
    began = time.perf_counter()
    for n in range(runs):
        execution_id = str(n)
        run_log = writer.open(execution_id)
        call_handler(noop, {}, HandlerContext(1, execution_id, 1, 0, run_log=run_log), None)
        writer.finish(run_log)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.INFO)
    install_capture()
    writer = RunLogWriter(_discard, 64 * 1024)
    per = args.runs // args.rounds
    before, after = [], []
    for _ in range(args.rounds):
        before.append(without_capture(per) / per * 1e6)
        after.append(with_capture(per, writer) / per * 1e6)
    figures = {
        "runs_per_round": per,
        "us_per_run_without": round(statistics.median(before), 3),
        "us_per_run_with": round(statistics.median(after), 3),
        "us_added": round(statistics.median(a - b for a, b in zip(after, before, strict=True)), 3),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
