"""One callback message taken from the queue and waiting in the notifier for its attempt.

It is read once, when it arrives: the line needs its app, its receiving host's keys and
its job to decide when it may go, and the attempt needs the message itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common.messages import CallbackMessage, read_message
from services.notifier.shares import HostKeys, ShareKeys

# The app key of a message that cannot be read: it goes at once (to the dead letters).
NO_APP = -1


@dataclass(frozen=True, slots=True)
class PendingCallback:
    """A callback message as the notifier holds it: its body, what it says (None when
    it cannot be read), the host keys its attempt counts against, when it arrived
    (monotonic seconds), and ``park`` when it is to wait in the first retry delay
    without an attempt (its app's or host's backlog in this notifier is past its
    bound, or it waited too long)."""

    body: bytes
    message: CallbackMessage | None
    hosts: HostKeys
    arrived: float = 0.0
    park: bool = False

    @property
    def app_pk(self) -> int:
        """The app whose callback this is (``NO_APP`` when unreadable)."""
        return self.message.app_pk if self.message is not None else NO_APP

    @property
    def job_id(self) -> int | None:
        """The job whose callback this is, when the message says (newer dispatchers)."""
        return self.message.job_id if self.message is not None else None

    @property
    def goes_at_once(self) -> bool:
        """No POST follows: it is parked, or it cannot be read."""
        return self.park or self.message is None


def read_pending(body: bytes, keys: ShareKeys, now: float = 0.0) -> PendingCallback:
    """The pending callback a message body carries, arrived at ``now``."""
    message = read_message(CallbackMessage, body)
    if message is None:
        return PendingCallback(body, None, HostKeys("", None), now)
    return PendingCallback(body, message, keys.of(message.url), now)


class CallbackPacking:
    """The notifier's ``Packing``: one callback per message, read as it arrives."""

    def __init__(self, keys: ShareKeys, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys = keys
        self._clock = clock

    def unpack(self, body: bytes) -> Sequence[PendingCallback]:
        """The body's one callback."""
        return (read_pending(body, self._keys, self._clock()),)

    def repack(self, units: Sequence[PendingCallback]) -> bytes:
        """The body of the one callback, sent back unattempted by a stopping notifier or
        after its run raised: marked to be read before its attempt, since the notifier
        that takes it cannot tell whether it was a copy of one attempted before."""
        (unit,) = units
        if unit.message is None or not unit.message.alone:
            return unit.body
        return unit.message.model_copy(update={"alone": False}).model_dump_json().encode()
