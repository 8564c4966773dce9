"""Where a notifier's (or, with ``--dispatcher``, a dispatcher's) time goes, from a
``py-spy record -f raw`` profile.

Each sample's stack is put in the first category whose frames it holds (the list is
ordered from the most specific purpose to the most general), so the shares add up to
100%. With ``--gil`` the samples are those in which a thread held the GIL: the shares
are of the notifier's Python CPU time.

    .venv/bin/python bench/profile_summary.py notifier.raw
    .venv/bin/python bench/profile_summary.py --wall notifier.wall.raw
    .venv/bin/python bench/profile_summary.py --dispatcher dispatcher.raw
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path

# (category, frame substrings): a stack with any of the substrings is in the category.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MySQL read of the deliveries (deliveries_to_send)", ("deliveries_to_send",)),
    ("attempt transaction (record_attempts)", ("record_until_written", "record_attempts")),
    ("waiting for a gathered read or record", ("gathering.py",)),
    ("sending terms read (secrets, networks)", ("_sending_terms",)),
    ("signing (webhook_headers)", ("webhook_headers",)),
    ("logging", ("logging/__init__.py", "common/logs.py")),
    ("metrics", ("prometheus_client",)),
    ("JSON and message models", ("read_message", "model_dump_json", "model_copy", "json/")),
    ("HTTP client (httpx/httpcore/anyio on the loop thread)", ("httpx/", "httpcore/", "anyio/")),
    ("waiting on the loop from a pool thread", ("CallbackPoster.post (",)),
    ("consumer: publish and tx.commit per flush", ("BatchPublisher.publish",)),
    ("consumer: acks", ("_settle_flushed",)),
    ("consumer: admit to and collect from the pool", ("PooledConsumer._admit", "_collect")),
    ("broker I/O loop (pika)", ("pika/",)),
    ("scheduler and fair line", ("fair_line.py", "scheduler.py", "shares.py", "host_limits")),
    (
        "hand-offs between threads (futures, conditions)",
        ("Future.set_result", "_chain_future", "Condition.", "ThreadPoolExecutor.submit"),
    ),
    ("asyncio event loop itself", ("asyncio/",)),
)
OTHER = "other"
# (thread, a frame near its root): which thread a stack ran on.
THREADS: tuple[tuple[str, str], ...] = (
    ("event loop thread (HTTP)", "run_forever"),
    # Before attempts were tasks, a pool thread per attempt; since, the store threads.
    ("pool or store threads", "concurrent/futures/thread.py"),
    ("main thread (broker consumer)", "run_notifier"),
)


# The dispatcher's: its results thread, its claim thread and the leader's main loop
# (fire), each by the module it runs in, so that a rename of a method keeps its place.
DISPATCHER_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("results: lock and match the executions (_lock_and_match)", ("_lock_and_match",)),
    ("results: callback deliveries (create/publish)", ("create_deliveries", "publish_deliveries")),
    ("results: end the jobs' triggers and retries", ("_end_triggers", "_retry")),
    ("results: recording transaction, rest (recording.py)", ("outcomes/recording.py",)),
    ("results: started keys (Redis)", ("started_keys.py",)),
    ("results: parse, consume, ack (results_thread.py)", ("results_thread.py",)),
    ("claim: compare-and-set of the due jobs (claim.py)", ("trigger/claim.py", "claim_rows.py")),
    ("claim: hand-over, execution rows, publish", ("claim_handover.py", "dispatch.py")),
    ("claim: loop, rest (claim_thread.py)", ("claim_thread.py",)),
    ("fire: due runs, rules, routing", ("fire.py", "fire_rules.py", "route.py", "waiting_runs")),
    (
        "upkeep (lease, sweeps, rescue, gauges)",
        ("dispatcher/upkeep/", "dispatcher/leadership/", "routing/workers.py"),
    ),
    ("logging", ("logging/__init__.py", "common/logs.py")),
    ("metrics", ("prometheus_client",)),
)
DISPATCHER_THREADS: tuple[tuple[str, str], ...] = (
    ("results thread", "results_thread.py"),
    ("claim thread", "claim_thread.py"),
    ("wake thread", "wake_thread.py"),
    ("lease thread", "lease_thread.py"),
    ("main loop (fire, upkeep)", "dispatcher/main.py"),
)


def read_samples(lines: Iterable[str]) -> Counter[str]:
    """Stack (``frame;frame;...``) to sample count, from py-spy's raw lines."""
    samples: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            samples[stack] += int(count)
    return samples


def category_of(stack: str) -> str:
    """The first category whose frames the stack holds; else "other" on its thread."""
    for name, marks in CATEGORIES:
        if any(mark in stack for mark in marks):
            return name
    return f"{OTHER}, {thread_of(stack)}"


def thread_of(stack: str) -> str:
    """The thread a stack ran on, by a frame near its root."""
    for name, mark in THREADS:
        if mark in stack:
            return name
    return OTHER


def dispatcher_category_of(stack: str) -> str:
    """A dispatcher stack's first category; else "other" on its thread."""
    for name, marks in DISPATCHER_CATEGORIES:
        if any(mark in stack for mark in marks):
            return name
    return f"{OTHER}, {dispatcher_thread_of(stack)}"


def dispatcher_thread_of(stack: str) -> str:
    """The dispatcher thread a stack ran on."""
    for name, mark in DISPATCHER_THREADS:
        if mark in stack:
            return name
    return OTHER


def summarise(samples: Counter[str], of: Callable[[str], str] = category_of) -> dict[str, float]:
    """Each category's (or with ``of=thread_of``, thread's) share of the samples, in
    percent, largest first."""
    total = sum(samples.values()) or 1
    shares: Counter[str] = Counter()
    for stack, count in samples.items():
        shares[of(stack)] += count
    return {name: round(100 * n / total, 1) for name, n in shares.most_common()}


POOL = THREADS[1][0]


def pool_wall_lines(samples: Counter[str]) -> list[str]:
    """From a ``--idle`` profile: what the attempts' pool threads spend their time on,
    waiting included (idle: no attempt to run)."""
    pool = Counter({k: n for k, n in samples.items() if thread_of(k) == POOL})
    working = ("deliver_pending", "_read_deliveries", "_record_attempts", "_read_terms")
    idle = Counter({k: n for k, n in pool.items() if not any(w in k for w in working)})
    busy = pool - idle
    total = sum(pool.values()) or 1
    lines = [f"pool threads, wall clock: {100 * sum(idle.values()) / total:.1f}% idle"]
    for name, share in summarise(busy).items():
        lines.append(f"{share * sum(busy.values()) / total:5.1f}%  {name}")
    return lines


def summary_lines(samples: Counter[str], dispatcher: bool = False) -> list[str]:
    """The summary as printed: threads, categories, top leaves; a dispatcher's with
    ``dispatcher``."""
    threads = dispatcher_thread_of if dispatcher else thread_of
    purposes = dispatcher_category_of if dispatcher else category_of
    lines = [f"{sum(samples.values())} samples", "by thread:"]
    lines += [f"{share:5.1f}%  {name}" for name, share in summarise(samples, threads).items()]
    lines.append("by purpose:")
    lines += [f"{share:5.1f}%  {name}" for name, share in summarise(samples, purposes).items()]
    lines.append("top leaves:")
    lines += [f"{share:5.1f}%  {frame}" for frame, share in top_leaves(samples)]
    return lines


def top_leaves(samples: Counter[str], count: int = 12) -> list[tuple[str, float]]:
    """The innermost frames that took the most samples, with their share in percent."""
    total = sum(samples.values()) or 1
    leaves: Counter[str] = Counter()
    for stack, n in samples.items():
        leaves[stack.rsplit(";", 1)[-1]] += n
    return [(frame, round(100 * n / total, 1)) for frame, n in leaves.most_common(count)]


def main(argv: list[str] | None = None) -> int:
    """Print the categories and the top leaves of one raw profile (a dispatcher's with
    ``--dispatcher``); with ``--wall``, what the pool threads of an ``--idle`` profile
    spend their time on."""
    args = sys.argv[1:] if argv is None else argv
    samples = read_samples(Path(args[-1]).read_text().splitlines())
    if "--wall" in args:
        print("\n".join(pool_wall_lines(samples)))
    else:
        print("\n".join(summary_lines(samples, "--dispatcher" in args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
