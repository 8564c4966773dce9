"""Reading the executions a dispatch message carries, and packing the unstarted rest."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import TypeAdapter

from common.messages import DispatchBatch, DispatchMessage

_DISPATCH = TypeAdapter(DispatchBatch | DispatchMessage)


class DispatchPacking:
    """The packing of a worker queue: a message carries one execution or a batch."""

    def unpack(self, body: bytes) -> Sequence[DispatchMessage]:
        """The executions in a dispatch body; raises ``pydantic.ValidationError``."""
        message = _DISPATCH.validate_json(body)
        if isinstance(message, DispatchBatch):
            return message.executions
        return (message,)

    def repack(self, units: Sequence[DispatchMessage]) -> bytes:
        """One message carrying ``units``."""
        return DispatchBatch(executions=list(units)).model_dump_json().encode()
