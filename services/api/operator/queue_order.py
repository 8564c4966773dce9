"""The vhost's queues in the order of the pipeline they serve, for the console and
``kairos stats``: results, callbacks (single, then packs) with their retry tiers folded
into one row (a namespace has dozens of tiers), dead letters, then one queue per
worker."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from common.topology import (
    CALLBACK_PACKS_QUEUE,
    CALLBACKS_DEAD_QUEUE,
    CALLBACKS_QUEUE,
    CALLBACKS_RETRY_EXCHANGE,
    RESULTS_DEAD_QUEUE,
    RESULTS_QUEUE,
    worker_queue,
)

RETRY_TIERS_ROW = f"{CALLBACKS_RETRY_EXCHANGE}.*"
"""The name of the row that holds every callback retry tier."""

_TIER = re.compile(re.escape(CALLBACKS_RETRY_EXCHANGE) + r"\.(\d+)(ms|s)$")
_WORKER_PREFIX = worker_queue("")
_FIXED = (
    RESULTS_QUEUE,
    CALLBACKS_QUEUE,
    CALLBACK_PACKS_QUEUE,
    RETRY_TIERS_ROW,
    RESULTS_DEAD_QUEUE,
    CALLBACKS_DEAD_QUEUE,
)


@dataclass(frozen=True)
class QueueRow:
    """One queue's counts, or the retry tiers' sums with each tier in ``tiers``."""

    name: str
    ready: int
    unacked: int
    consumers: int
    tiers: tuple[QueueRow, ...] = field(default=())


def tier_delay_ms(name: str) -> int | None:
    """The delay a retry tier queue is named by (``...retry.30s``: 30000); None for any
    other queue."""
    found = _TIER.match(name)
    if found is None:
        return None
    return int(found.group(1)) * (1 if found.group(2) == "ms" else 1000)


def _row(queue: Mapping[str, int | str]) -> QueueRow:
    return QueueRow(
        str(queue["name"]), int(queue["ready"]), int(queue["unacked"]), int(queue["consumers"])
    )


def _rank(row: QueueRow) -> tuple[int, str]:
    if row.name in _FIXED:
        return _FIXED.index(row.name), ""
    if row.name.startswith(_WORKER_PREFIX):
        return len(_FIXED), row.name
    return len(_FIXED) + 1, row.name


def ordered_queues(queues: Sequence[Mapping[str, int | str]]) -> list[QueueRow]:
    """The queues by meaning, the retry tiers as one row (tiers by delay inside it)."""
    rows = [_row(q) for q in queues]
    tiers = sorted(
        (r for r in rows if tier_delay_ms(r.name) is not None),
        key=lambda r: tier_delay_ms(r.name) or 0,
    )
    others = [r for r in rows if tier_delay_ms(r.name) is None]
    if tiers:
        folded = QueueRow(
            RETRY_TIERS_ROW,
            sum(t.ready for t in tiers),
            sum(t.unacked for t in tiers),
            sum(t.consumers for t in tiers),
            tuple(tiers),
        )
        others.append(folded)
    return sorted(others, key=_rank)
