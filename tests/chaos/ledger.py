"""The chaos suite's handler, and the ledger of every side effect it completed.

``chaos.effect`` sleeps ``params["seconds"]`` (a handler's work) and then appends one
line to the ledger file named by ``KAIROS_CHAOS_LEDGER``: the job, its trigger time and
the execution id. A file, not Redis: scenarios wipe or restart Redis, and the ledger
must outlive every fault. Lines are short single writes in append mode, so lines
written by several worker processes at once never mix.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.worker.registry import HandlerContext, handler
from tests.witnesses import Effect, read_effects


@handler("chaos.effect")
def effect(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Work for ``params["seconds"]`` (default 0.05), then record the completed effect."""
    time.sleep(float(params.get("seconds", 0.05)))
    line = f"{ctx.job_id} {ctx.trigger_time} {ctx.execution_id}\n".encode()
    fd = os.open(os.environ["KAIROS_CHAOS_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Ledger:
    """What the ledger file says: completed effects by trigger, and by execution id."""

    effects: list[Effect]
    by_trigger: Counter[tuple[int, int]]
    execution_ids: set[str]

    @classmethod
    def read(cls, path: Path) -> Ledger:
        """Read the ledger written so far (an absent file is an empty ledger)."""
        effects = read_effects(path)
        by_trigger = Counter((e.job_id, e.trigger_time) for e in effects)
        return cls(effects, by_trigger, {e.execution_id for e in effects})

    def duplicated(self) -> dict[tuple[int, int], int]:
        """Triggers whose side effect completed more than once."""
        return {trigger: n for trigger, n in self.by_trigger.items() if n > 1}
