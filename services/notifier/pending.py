"""One callback message taken from the queue and waiting in the notifier for its attempt.

It is read once, when it arrives: the line needs its app, its receiving host's keys and
its job to decide when it may go, and the attempt needs the message itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from common.messages import PACK_PREFIX, CallbackMessage, CallbackPack, read_message
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

    def own_body(self) -> bytes:
        """This callback's own message: the body it came in, or, one of a pack (which
        came with none of its own), its message written anew."""
        if self.body or self.message is None:
            return self.body
        return self.message.model_dump_json().encode()

    @property
    def goes_at_once(self) -> bool:
        """No POST follows: it is parked, or it cannot be read."""
        return self.park or self.message is None


def read_pending(body: bytes, keys: ShareKeys, now: float = 0.0) -> PendingCallback:
    """The pending callback a message body carries, arrived at ``now``."""
    message = read_message(CallbackMessage, body)
    if message is None:
        return _unreadable(body, now)
    return PendingCallback(body, message, keys.of(message.url), now)


def read_pack(body: bytes, keys: ShareKeys, now: float = 0.0) -> list[PendingCallback]:
    """The pending callbacks a pack's body carries, arrived at ``now``, each with no body
    of its own (``PendingCallback.own_body`` writes it when it travels again).

    When the pack does not read as a whole, each callback is read on its own: one that
    cannot be read goes to the dead letters by itself, the others are attempted; a body
    that is not even JSON is one unreadable callback.
    """
    try:
        pack = CallbackPack.model_validate_json(body)
    except ValidationError:
        return _one_by_one(body, keys, now)
    return [PendingCallback(b"", m, keys.of(m.url), now) for m in pack.callbacks]


def _one_by_one(body: bytes, keys: ShareKeys, now: float) -> list[PendingCallback]:
    try:
        items = json.loads(body)["callbacks"]
    except (ValueError, TypeError, KeyError, RecursionError):
        return [_unreadable(body, now)]
    if not isinstance(items, list) or not items:
        return [_unreadable(body, now)]
    found: list[PendingCallback] = []
    for item in items:
        text = json.dumps(item).encode()
        message = read_message(CallbackMessage, text)
        found.append(
            _unreadable(text, now)
            if message is None
            else PendingCallback(text, message, keys.of(message.url), now)
        )
    return found


def _unreadable(body: bytes, now: float) -> PendingCallback:
    return PendingCallback(body, None, HostKeys("", None), now)


class CallbackPacking:
    """The notifier's ``Packing``: a message carries one callback, or a pack of one
    app's callbacks to one URL (``CallbackPack``); each is read as it arrives."""

    def __init__(self, keys: ShareKeys, clock: Callable[[], float] = time.monotonic) -> None:
        self._keys = keys
        self._clock = clock

    def unpack(self, body: bytes) -> Sequence[PendingCallback]:
        """The body's callbacks."""
        if body.startswith(PACK_PREFIX):
            return read_pack(body, self._keys, self._clock())
        return (read_pending(body, self._keys, self._clock()),)

    def repack(self, units: Sequence[PendingCallback]) -> bytes:
        """One body carrying ``units``, sent back unattempted by a stopping notifier or
        after its run raised: each marked to be read before its attempt, since the
        notifier that takes it cannot tell whether it was a copy of one attempted
        before. Several go as a pack (``CallbackPack``); one alone, as it came."""
        if len(units) == 1:
            (unit,) = units
            if unit.message is None or not unit.message.alone:
                return unit.own_body()
            return _not_alone(unit.message).model_dump_json().encode()
        items = [
            u.own_body() if u.message is None else _not_alone(u.message).model_dump_json().encode()
            for u in units
        ]
        return PACK_PREFIX + b",".join(items) + b"]}"


def _not_alone(message: CallbackMessage) -> CallbackMessage:
    return message.model_copy(update={"alone": False}) if message.alone else message
