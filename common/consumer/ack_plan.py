"""Planning the acks for deliveries whose work is done while others are still held."""

from __future__ import annotations

from collections.abc import Iterable


def plan_acks(done: Iterable[int], waiting: Iterable[int]) -> tuple[int | None, list[int]]:
    """How to ack the ``done`` delivery tags while the ``waiting`` ones stay unacked.

    One ``multiple`` ack covers every done tag below the lowest waiting one (each ack
    is a frame and a flush in pika, a large share of a worker's CPU one per message); the
    done tags above it are acked one by one, so a long run never holds them back.
    Returns the tag for the multiple ack (None when there is none) and the singles.
    """
    ordered = sorted(done)
    floor = min(waiting, default=None)
    below = [tag for tag in ordered if floor is None or tag < floor]
    above = ordered[len(below) :]
    if len(below) < 2:
        return None, ordered
    return below[-1], above
