"""Where a notifier's time goes, from a ``py-spy record -f raw`` profile.

Each sample's stack is put in the first category whose frames it holds (the list is
ordered from the most specific purpose to the most general), so the shares add up to
100%. With ``--gil`` the samples are those in which a thread held the GIL: the shares
are of the notifier's Python CPU time.

    .venv/bin/python bench/profile_summary.py notifier.raw
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

# (category, frame substrings): a stack with any of the substrings is in the category.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("MySQL read of the delivery (delivery_to_send)", ("delivery_to_send",)),
    ("attempt transaction (record_attempt)", ("record_until_written", "record_attempt")),
    ("sending terms read (secrets, networks)", ("_sending_terms",)),
    ("signing (webhook_headers)", ("webhook_headers",)),
    ("logging", ("logging/__init__.py", "common/logs.py")),
    ("metrics", ("prometheus_client",)),
    ("JSON and message models", ("read_message", "model_dump_json", "model_copy", "json/")),
    ("HTTP client (httpx/httpcore/anyio on the loop thread)", ("httpx/", "httpcore/", "anyio/")),
    ("waiting on the loop from a pool thread", ("CallbackPoster.post",)),
    ("broker (pika: consume, ack, publish)", ("pika/",)),
    ("scheduler and fair line", ("fair_line.py", "scheduler.py", "shares.py", "host_limits")),
    ("thread pool and consumer hand-offs", ("concurrent/futures", "threading.py", "queue.py")),
    ("asyncio event loop itself", ("asyncio/",)),
)
OTHER = "other"


def read_samples(lines: Iterable[str]) -> Counter[str]:
    """Stack (``frame;frame;...``) to sample count, from py-spy's raw lines."""
    samples: Counter[str] = Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if stack and count.isdigit():
            samples[stack] += int(count)
    return samples


def category_of(stack: str) -> str:
    """The first category whose frames the stack holds."""
    for name, marks in CATEGORIES:
        if any(mark in stack for mark in marks):
            return name
    return OTHER


def summarise(samples: Counter[str]) -> dict[str, float]:
    """Each category's share of the samples, in percent, largest first."""
    total = sum(samples.values()) or 1
    shares: Counter[str] = Counter()
    for stack, count in samples.items():
        shares[category_of(stack)] += count
    return {name: round(100 * n / total, 1) for name, n in shares.most_common()}


def top_leaves(samples: Counter[str], count: int = 12) -> list[tuple[str, float]]:
    """The innermost frames that took the most samples, with their share in percent."""
    total = sum(samples.values()) or 1
    leaves: Counter[str] = Counter()
    for stack, n in samples.items():
        leaves[stack.rsplit(";", 1)[-1]] += n
    return [(frame, round(100 * n / total, 1)) for frame, n in leaves.most_common(count)]


def main(argv: list[str] | None = None) -> int:
    """Print the categories and the top leaves of one raw profile."""
    args = sys.argv[1:] if argv is None else argv
    samples = read_samples(Path(args[0]).read_text().splitlines())
    print(f"{sum(samples.values())} samples")
    for name, share in summarise(samples).items():
        print(f"{share:5.1f}%  {name}")
    print("top leaves:")
    for frame, share in top_leaves(samples):
        print(f"{share:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
