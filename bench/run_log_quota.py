"""What the per-app run-log quota adds to one write of the run-log writer.

Builds batches as a busy worker's writer sees them each second (``--runs`` runs spread
over ``--apps`` apps, ``--lines`` lines of ~100 bytes each) and times ``write_once``
with a store that keeps nothing, without a quota and with every app under a quota it
does not reach (real Redis, one script call per write), interleaved in rounds so both
see the same machine; prints milliseconds per write and microseconds per line.

    .venv/bin/python bench/run_log_quota.py --runs 200 --apps 10 --lines 5

Needs Redis on KAIROS_REDIS_URL (127.0.0.1:6379 by default); its keys are deleted after.
The last line printed is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time
from collections.abc import Sequence

import redis

from common.config import StoreSettings
from common.keys import RedisKeys
from services.worker.log_quota import RunLogQuota
from services.worker.log_writer import RunLogWriter
from services.worker.run_logs import LogLine

LINE = "x" * 100


def _keep_nothing(lines: Sequence[LogLine]) -> None:
    return None


def one_write(writer: RunLogWriter, runs: int, apps: int, lines: int, tag: str) -> float:
    """Seconds for one ``write_once`` of ``runs`` runs' lines."""
    for n in range(runs):
        run_log = writer.open(f"{tag}-{n}", n % apps + 1)
        assert run_log is not None
        for k in range(lines):
            run_log.append("INFO", f"{k} {LINE}")
        run_log.close()
    began = time.perf_counter()
    written = writer.write_once()
    took = time.perf_counter() - began
    assert written == runs * lines, written
    return took


def main(argv: list[str] | None = None) -> None:
    """Run the rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--apps", type=int, default=10)
    parser.add_argument("--lines", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args(argv)
    client = redis.Redis.from_url(StoreSettings().redis_url)
    keys = RedisKeys("bench_" + secrets.token_hex(4))
    quotas = {app: 10**12 for app in range(1, args.apps + 1)}
    plain = RunLogWriter(_keep_nothing, 64 * 1024)
    quota = RunLogQuota(client, keys, lambda: quotas)
    counted = RunLogWriter(_keep_nothing, 64 * 1024, quota=quota)
    before, after = [], []
    try:
        for r in range(args.rounds):
            before.append(one_write(plain, args.runs, args.apps, args.lines, f"p{r}"))
            after.append(one_write(counted, args.runs, args.apps, args.lines, f"q{r}"))
    finally:
        client.delete(*[keys.run_log_quota(app) for app in quotas])
    lines = args.runs * args.lines
    figures = {
        "runs": args.runs,
        "apps": args.apps,
        "lines_per_write": lines,
        "ms_per_write_without": round(statistics.median(before) * 1e3, 3),
        "ms_per_write_with": round(statistics.median(after) * 1e3, 3),
        "us_added_per_line": round(
            statistics.median(a - b for a, b in zip(after, before, strict=True)) / lines * 1e6,
            3,
        ),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
