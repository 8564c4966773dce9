"""Jitter: how late a recurring job's scheduled trigger fires, on purpose.

A job with ``jitter_seconds`` N fires each scheduled trigger at its time plus an offset
in [0, N) s, so that many jobs on the same schedule (every hour on the hour) do not all
start in the same second. The offset is a pure function of the job and the trigger
time: every dispatcher, a preview and a claim made again after a crash compute the same
one, and the trigger keeps its own time (and its execution id); only the time it fires
at (the execution's ``scheduled_at``) moves.
"""

from __future__ import annotations

import hashlib


def jitter_offset_ms(job_id: int, trigger_ms: int, jitter_seconds: int) -> int:
    """How many ms after ``trigger_ms`` the job's trigger fires: in [0, jitter_seconds
    * 1000), spread evenly over the jobs and triggers; 0 without jitter."""
    if jitter_seconds <= 0:
        return 0
    digest = hashlib.blake2b(f"{job_id}:{trigger_ms}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % (jitter_seconds * 1000)


def jittered_ms(job_id: int, trigger_ms: int, jitter_seconds: int) -> int:
    """The time the job's trigger at ``trigger_ms`` fires, its jitter added."""
    return trigger_ms + jitter_offset_ms(job_id, trigger_ms, jitter_seconds)
