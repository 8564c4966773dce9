"""A handler only one worker of the poison suite registers, and that worker is stopped:
its jobs are left with no live worker to run them."""

from __future__ import annotations

from typing import Any

from services.worker.registry import HandlerContext, handler


@handler("poison.orphan")
def orphan(params: dict[str, Any], ctx: HandlerContext) -> None:
    """Do nothing; what matters is that no live worker runs it."""
