"""Execution ids: random for retries and manual runs, derived for claimed triggers."""

from __future__ import annotations

import hashlib
import uuid

# Execution ids of claimed triggers are names in this space (UUID version 5).
TRIGGER_IDS = uuid.UUID("6f1c5e8a-3d2b-4c7e-9a41-0b8f2d6e5c13")


def trigger_execution_id(job_id: int, job_created_at: int, trigger_time: int) -> str:
    """The execution id of a job's first attempt at one trigger.

    The same trigger always gets the same id: a claim that sent its executions and then
    rolled back (MySQL lost between the broker's commit and its own) is claimed again
    under the same ids, so the workers see copies of one execution, which run once,
    not a second execution. The job's creation time keeps ids apart across databases
    that reuse job ids. It is ``uuid.uuid5`` written out: the same SHA-1 and bits, in
    a third of the time.
    """
    name = f"{job_id}/{job_created_at}/{trigger_time}/1".encode()
    raw = bytearray(hashlib.sha1(TRIGGER_IDS.bytes + name, usedforsecurity=False).digest())
    raw[6] = (raw[6] & 0x0F) | 0x50  # version 5
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw[:16].hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
