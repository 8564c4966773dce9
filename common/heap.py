"""Keeping the garbage collector's full passes off the hot paths of a long-lived service."""

from __future__ import annotations

import gc


def freeze_startup_heap() -> int:
    """Move every object alive now out of the collector's reach; returns how many.

    A service holds ~100,000 objects after startup (modules, SQLAlchemy metadata,
    pydantic schemas, pika and redis clients) that live as long as the process. A full
    collection walked them all: 50-100 ms, striking mid-batch (building 1,000 dispatch
    messages took 48 ms instead of 8 when one did). Frozen, they are never walked again;
    collections then cost what the objects made since cost.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
