"""Kairos against Celery and Dramatiq: N no-op jobs, first submit to last run, same servers.

Each round runs ``--jobs`` no-op jobs through each system in turn (Kairos, Celery,
Dramatiq, Kairos, ...) for ``--rounds`` rounds, each on a RabbitMQ vhost of its own made
for that round through the management API and dropped after it, with only that system's
processes running. The clock starts at the first submit and stops when the last job has
run:

- Kairos: a fresh namespace with ``kairos api``, one ``kairos dispatcher`` and two
  ``kairos worker --capacity 16`` (no notifier: no job has a callback), started as in
  ``bench/harness.py``. Jobs go through ``POST /openapi/jobs/batch``, 1,000 per request
  from 4 threads, when ``/openapi.json`` lists that route and a one-job probe of it
  succeeds, else as single ``POST /openapi/jobs`` from 16 threads. Stop: the latest
  ``ended_at`` of the measured SUCCEEDED executions.
- Celery: two worker processes, ``--pool threads --concurrency 16`` each (32 threads,
  as the two Kairos workers of capacity 16), no result backend, defaults otherwise;
  ``apply_async`` from one thread.
- Dramatiq: ``dramatiq bench.peers.dramatiq_tasks --processes 2 --threads 8`` (16
  threads), default middleware; ``actor.send`` from one thread.
- The peers' task INCRs a Redis counter of its own; the run that brings it to N stamps
  the time, which stops the clock (``bench/peers/__init__.py``). The peers submit from
  one thread: more threads did not make Celery's ``apply_async`` faster on 2 cores
  (about 2,000 msg/s from 1 thread, 1,750 from 4, its workers idle).

Each round's line ends with the host's 1-minute load average: other work on the same
machine shows there, and the alternating order spreads it over the three systems.

Every system is warmed up before its clock starts. It prints each figure (with the CPU
milliseconds per job of each of the system's processes and of the store servers,
``bench/cpu_meter.py``, from the first submit to the last run), the
Kairos/peer ratios per round and of the medians, a note on what each system guarantees,
and last one JSON line:

    {"jobs", "rounds", "kairos_jobs_per_s": [..], "celery_jobs_per_s": [..],
     "dramatiq_jobs_per_s": [..], "median": {...}, "ratio_vs_celery",
     "ratio_vs_dramatiq", "cpu_ms_per_job": {system: [per round]}, "commit"}

A round that fails is ``null`` in its list and the exit status is 1. Processes are
stopped by pid and every namespace, vhost and Redis key is dropped whatever happens.

Needs MySQL, Redis and RabbitMQ (with its management API) on 127.0.0.1, and the peers,
which are bench-only dependencies:

    .venv/bin/pip install -r bench/requirements-peers.txt
    .venv/bin/python bench/vs_peers.py
    .venv/bin/python bench/vs_peers.py --jobs 2000 --rounds 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import secrets
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness import BenchError, git_commit_dirty, log, stop_on_sigterm
from peers.kairos_round import run_kairos_round
from peers.rounds import RoundFigure, run_celery_round, run_dramatiq_round

SYSTEMS = ("kairos", "celery", "dramatiq")
PEER_MODULES = ("celery", "dramatiq", "pika")

GUARANTEES = """\
What each system guarantees here (as configured in this benchmark):
- Kairos: the job row is committed in MySQL before the API answers; dispatch and result
  messages are persistent and published in committed AMQP transactions; a worker acks
  its dispatch only after its result is committed to the broker; every execution is a
  MySQL row (status, worker, timings, result); a redelivered execution id is not run
  twice (Redis key in the worker, MySQL check in the results consumer); retries,
  timeouts, misfire and overlap policies; signed callbacks retried until delivered.
- Celery (no result backend, defaults): messages are persistent, but published without
  publisher confirms (confirm_publish is off); a task is acked when the worker receives
  it (acks_late off), so a worker crash loses the tasks it holds; no outcome is stored
  anywhere; a redelivered message runs again.
- Dramatiq (RabbitMQ, defaults): messages are persistent, published without confirms
  (confirm_delivery=False); a message is acked after the actor returns (at-least-once),
  failures are retried with backoff and then dead-lettered; no result is stored (the
  Results middleware is not on); a redelivered message runs again."""


@dataclass
class Results:
    """Every round's figure per system; None where the round failed."""

    by_system: dict[str, list[float | None]]
    # Each round's CPU milliseconds per job by process, per system.
    cpu: dict[str, list[dict[str, float]]] = field(default_factory=dict)

    def median(self, system: str) -> float | None:
        """Median jobs/s over the rounds that finished."""
        done = [v for v in self.by_system[system] if v is not None]
        return round(statistics.median(done), 1) if done else None

    def ratio(self, peer: str) -> float | None:
        """Kairos median / peer median."""
        kairos, other = self.median("kairos"), self.median(peer)
        return round(kairos / other, 3) if kairos and other else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The benchmark's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of K, C, D")
    parser.add_argument(
        "--deadline", type=float, default=600.0, help="seconds one round may take to finish"
    )
    return parser.parse_args(argv)


def missing_peers() -> list[str]:
    """The peer packages this interpreter cannot import."""
    return [name for name in PEER_MODULES if importlib.util.find_spec(name) is None]


def run_round(
    system: str, args: argparse.Namespace, run_id: str, index: int, log_dir: Path
) -> RoundFigure | None:
    """One system's round; None (reported) when it failed."""
    runners: dict[str, Callable[[int, float, str, int, Path], RoundFigure]] = {
        "kairos": run_kairos_round,
        "celery": run_celery_round,
        "dramatiq": run_dramatiq_round,
    }
    try:
        return runners[system](args.jobs, args.deadline, run_id, index, log_dir)
    except BenchError as e:
        log(f"FAILED: {system} round {index}: {e}")
        return None


def print_figure(figure: RoundFigure) -> None:
    """One round's line, with the host's 1-minute load average (others' work shows), and
    the CPU milliseconds per job of each process."""
    print(
        f"round {figure.index} {figure.system:<8} {figure.jobs} jobs in "
        f"{figure.seconds:6.2f} s = {figure.jobs_per_s:8.1f} jobs/s "
        f"(submit {figure.submit_seconds:.2f} s; {figure.note}; "
        f"load1 {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
        flush=True,
    )
    cpu = ", ".join(f"{name} {ms:g}" for name, ms in figure.cpu_ms_per_job.items())
    print(f"  CPU ms per job: {cpu}", flush=True)


def print_ratios(results: Results, rounds: int) -> None:
    """Per-round Kairos/peer ratios, then the medians and their ratios."""
    kairos = results.by_system["kairos"]
    for peer in SYSTEMS[1:]:
        other = results.by_system[peer]
        per_round = [
            f"{k / o:.3f}" if k is not None and o else "n/a"
            for k, o in zip(kairos, other, strict=True)
        ]
        print(f"Kairos/{peer} per round: {', '.join(per_round)}")
    for system in SYSTEMS:
        print(f"median {system:<8} {results.median(system)} jobs/s over {rounds} rounds")
    for peer in SYSTEMS[1:]:
        print(f"Kairos/{peer} (medians): {results.ratio(peer)}")


def report(args: argparse.Namespace, results: Results) -> None:
    """The guarantees note, the ratios and the JSON line last."""
    print(GUARANTEES)
    print_ratios(results, args.rounds)
    line = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        **{f"{s}_jobs_per_s": results.by_system[s] for s in SYSTEMS},
        "median": {s: results.median(s) for s in SYSTEMS},
        "ratio_vs_celery": results.ratio("celery"),
        "ratio_vs_dramatiq": results.ratio("dramatiq"),
        "cpu_ms_per_job": results.cpu,
        "commit": git_commit_dirty(),
    }
    print(json.dumps(line), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run every round; 0 when all finished, 1 when one failed, 2 when peers are missing."""
    args = parse_args(argv)
    missing = missing_peers()
    if missing:
        print(
            f"vs_peers needs {', '.join(missing)}, bench-only dependencies: "
            "pip install -r bench/requirements-peers.txt",
            file=sys.stderr,
        )
        return 2
    stop_on_sigterm()
    run_id = secrets.token_hex(4)
    log_dir = Path(tempfile.mkdtemp(prefix=f"kairos-vs-peers-{run_id}-"))
    log(f"run {run_id}, logs in {log_dir}")
    results = Results({s: [] for s in SYSTEMS})
    for index in range(1, args.rounds + 1):
        for system in SYSTEMS:
            figure = run_round(system, args, run_id, index, log_dir)
            results.by_system[system].append(round(figure.jobs_per_s, 1) if figure else None)
            if figure is not None:
                results.cpu.setdefault(system, []).append(figure.cpu_ms_per_job)
                print_figure(figure)
    report(args, results)
    failed = any(v is None for values in results.by_system.values() for v in values)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
