"""The callback path against the pipeline's speed, and the HTTP clients that could
carry it, in one run.

Every round, in an order that alternates from round to round:

(a) N due ``demo.noop`` jobs without callbacks through the real stack (one dispatcher,
    two workers of capacity 16, one notifier idle), timed from their commit to the last
    SUCCEEDED execution (``ended_at``);
(b) the same N, every job calling back to the receiver, timed from the commit to the
    last DELIVERED callback (``delivered_at``): callbacks/s is N over that time;
(c) the floor: ``bench/posters.py --client floor``, a poster on asyncio streams alone
    over keep-alive connections, posting signed bodies like Kairos's for ``--post-seconds``;
(d) each candidate client posting the same signed bodies the same way: httpx.AsyncClient,
    aiohttp, h11 and httptools over asyncio streams, and Kairos's own client
    (``kairos`` on the poster's loop, ``kairos-threads`` from threads as the notifier).

The receiver is ``bench/fast_receiver.py`` in a process of its own (a raw asyncio
protocol on uvloop): its CPU share in each phase is printed, so that a phase it held
back would show (near 100%). Each service's CPU seconds in (a) and (b) are printed too.

With ``--profile-dir DIR`` one more (b) runs after the rounds with ``py-spy record --gil
-f raw`` on the notifier; its raw profile and its summary (``bench/profile_summary.py``)
go to DIR. That run's figures are not in the medians (the sampler slows what it samples).

    .venv/bin/pip install -r bench/requirements-callbacks.txt
    .venv/bin/python bench/callbacks.py --rounds 3 --profile-dir /tmp/callbacks-profile
    .venv/bin/python bench/callbacks.py --jobs 30000 --rounds 1

With ``--old-tree DIR`` (an older commit's source, e.g. ``git archive 57f0df1 | tar -x
-C DIR``) every round runs (b) a second time on a stack of that tree's Kairos, the two
(b) in turning order: an interleaved A/B pair per round (``with_callbacks_old``).

The last line printed is one JSON object with every round and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from callback_pipeline import PipelineRun, run_pipeline
from harness import BenchError, git_commit_dirty, log
from receiver_process import ReceiverProcess

REPO = Path(__file__).resolve().parent.parent
CLIENTS = ("floor", "httptools", "kairos", "kairos-threads", "h11", "aiohttp", "httpx")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=3_000, help="N (30000 for the large run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per phase")
    parser.add_argument("--connections", type=int, default=32, help="each poster's connections")
    parser.add_argument("--post-seconds", type=float, default=5.0, help="each poster's run")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="posters to run")
    parser.add_argument("--profile-dir", type=Path, help="profile the notifier in one more (b)")
    parser.add_argument("--old-tree", type=Path, help="run (b) on this source tree too (A/B)")
    return parser.parse_args(argv)


def run_poster(client: str, receiver: ReceiverProcess, args: argparse.Namespace) -> dict[str, Any]:
    """One poster's figures, from a process of its own, with the receiver's CPU share."""
    argv = [sys.executable, str(REPO / "bench" / "posters.py"), "--client", client]
    argv += ["--url", receiver.url, "--connections", str(args.connections)]
    argv += ["--seconds", str(args.post_seconds)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with receiver.phase() as seen:
        done = receiver.run_beside(argv, env)
    figures: dict[str, Any] = json.loads(done.strip().splitlines()[-1])
    figures["received"] = seen.posts
    figures["receiver_cpu_share"] = seen.cpu_share
    return figures


def pipeline_figures(found: PipelineRun) -> dict[str, Any]:
    """A pipeline phase as a flat dict."""
    return {
        "elapsed_s": found.elapsed_s,
        "per_s": found.per_s,
        "receiver_cpu_share": found.receiver_cpu_share,
        "cpu_s": found.cpu_s,
        "reconciled": found.reconciled,
        "recorded_s": found.recorded_s,
        "lag_ms": found.lag_ms,
    }


def run_round(n: int, receiver: ReceiverProcess, args: argparse.Namespace) -> dict[str, Any]:
    """One round: (a) and (b) in an order that alternates by round, then the posters."""
    figures: dict[str, Any] = {"round": n + 1}
    phases: list[tuple[str, bool, Path | None]] = [
        ("without_callbacks", False, None),
        ("with_callbacks", True, None),
    ]
    if args.old_tree is not None:
        phases.append(("with_callbacks_old", True, args.old_tree))
    shift = n % len(phases)
    for name, with_callbacks, tree in phases[shift:] + phases[:shift]:
        found = run_pipeline(args.jobs, receiver, with_callbacks, args.deadline, tree=tree)
        figures[name] = pipeline_figures(found)
        log(f"round {n + 1} {name}: {found.describe()}")
    clients = [client for client in args.clients.split(",") if client]
    shift = n % len(clients)
    for client in clients[shift:] + clients[:shift]:
        figures[client] = run_poster(client, receiver, args)
        log(f"round {n + 1} {client}: {figures[client]}")
    for name in ("with_callbacks", "with_callbacks_old"):
        if name in figures:
            figures[name]["ratio"] = round(
                figures[name]["elapsed_s"] / figures["without_callbacks"]["elapsed_s"], 2
            )
    figures["ratio"] = figures["with_callbacks"]["ratio"]
    if "floor" in figures:
        floor = figures["floor"]["posts_per_s"]
        figures["notifier_share_of_floor"] = round(figures["with_callbacks"]["per_s"] / floor, 4)
    return figures


def median_of(rounds: list[dict[str, Any]], *path: str) -> float | None:
    """The median of one figure over the rounds that have it."""
    values = []
    for figures in rounds:
        value: Any = figures
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, int | float):
            values.append(float(value))
    return round(statistics.median(values), 4) if values else None


def medians(rounds: list[dict[str, Any]], clients: list[str]) -> dict[str, float | None]:
    """The medians the summary quotes."""
    found = {
        "jobs_per_s_without_callbacks": median_of(rounds, "without_callbacks", "per_s"),
        "elapsed_s_without_callbacks": median_of(rounds, "without_callbacks", "elapsed_s"),
        "callbacks_per_s": median_of(rounds, "with_callbacks", "per_s"),
        "last_callback_s": median_of(rounds, "with_callbacks", "elapsed_s"),
        "ratio": median_of(rounds, "ratio"),
        "notifier_share_of_floor": median_of(rounds, "notifier_share_of_floor"),
        "notifier_cpu_s": median_of(rounds, "with_callbacks", "cpu_s", "notifier"),
    }
    if any("with_callbacks_old" in figures for figures in rounds):
        found["old_callbacks_per_s"] = median_of(rounds, "with_callbacks_old", "per_s")
        found["old_last_callback_s"] = median_of(rounds, "with_callbacks_old", "elapsed_s")
        found["old_ratio"] = median_of(rounds, "with_callbacks_old", "ratio")
        found["old_notifier_cpu_s"] = median_of(rounds, "with_callbacks_old", "cpu_s", "notifier")
    for client in clients:
        found[f"{client}_posts_per_s"] = median_of(rounds, client, "posts_per_s")
        found[f"{client}_receiver_cpu_share"] = median_of(rounds, client, "receiver_cpu_share")
    return found


def print_summary(summary: dict[str, float | None], jobs: int) -> None:
    """The medians, in words."""
    print(
        f"{jobs} jobs without callbacks: {summary['elapsed_s_without_callbacks']} s "
        f"({summary['jobs_per_s_without_callbacks']} jobs/s); with callbacks the last "
        f"landed after {summary['last_callback_s']} s ({summary['callbacks_per_s']} "
        f"callbacks/s), {summary['ratio']}x the time"
    )
    for key, value in summary.items():
        if key.endswith("_posts_per_s"):
            print(f"  {key.removesuffix('_posts_per_s')}: {value} posts/s")
    print(f"notifier / floor: {summary['notifier_share_of_floor']}")
    print(f"notifier CPU s in (b): {summary['notifier_cpu_s']}")
    if "old_callbacks_per_s" in summary:
        print(
            f"old tree: last callback after {summary['old_last_callback_s']} s "
            f"({summary['old_callbacks_per_s']} callbacks/s), {summary['old_ratio']}x; "
            f"notifier CPU s {summary['old_notifier_cpu_s']}"
        )


def profile_notifier(receiver: ReceiverProcess, args: argparse.Namespace) -> None:
    """One more (b) with py-spy on the notifier; its raw profile and summary in the dir."""
    from profile_summary import pool_wall_lines, read_samples, summary_lines

    args.profile_dir.mkdir(parents=True, exist_ok=True)
    raw = args.profile_dir / "notifier.raw"
    found = run_pipeline(args.jobs, receiver, True, args.deadline, profile_to=raw)
    log(f"profiled run: {found.describe()}")
    samples = read_samples(raw.read_text().splitlines())
    lines = [found.describe(), "py-spy record --gil:", *summary_lines(samples)]
    wall = read_samples(raw.with_suffix(".wall.raw").read_text().splitlines())
    lines += ["py-spy record --idle:", *pool_wall_lines(wall)]
    (args.profile_dir / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    """Run the rounds, print each and the medians, and one JSON line."""
    args = parse_args(argv)
    clients = [client for client in args.clients.split(",") if client]
    rounds: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with ReceiverProcess.start() as receiver:
        try:
            for n in range(args.rounds):
                rounds.append(run_round(n, receiver, args))
            if args.profile_dir is not None:
                profile_notifier(receiver, args)
        except BenchError as e:
            log(f"failed: {e}")
            return 1
    summary = medians(rounds, clients)
    print_summary(summary, args.jobs)
    load = [round(x, 2) for x in (*load_before, *os.getloadavg())]
    print(f"load average before {load[:3]}, after {load[3:]}")
    report = {"jobs": args.jobs, "rounds": rounds, "medians": summary, "load_average": load}
    report["commit"] = git_commit_dirty()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
