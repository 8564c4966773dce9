"""The started keys (which worker took an execution, how its run ended, or who fenced
it) and their one owner, ``StartedMarks``.

The key is set (NX) when a worker admits a delivery, to its worker id. Once the run
has ended and before its result is published, the worker appends the result as JSON
after a newline. A copy of the delivery that comes back later (the broker connection
dropped before the ack) is then reported with the outcome the run really had, instead
of as LOST; so is a run whose worker died between finishing and publishing.

Redis may lose these keys (a flush, a failover to a replica behind, a restart without
persistence). The started epoch (``RedisKeys.started_epoch``) tells when: it is set
when missing, so it holds the first moment keys were kept since the last loss. An
execution dispatched before it may have had a key that is gone; for those, MySQL is
the guard (``services/worker/start_guard.py``, the dead-worker rescue).

Only ``StartedMarks`` reads or writes the keys: the worker takes, releases and stores
outcomes in them (its Lua scripts), the reconciler and operators fence them, the
results path shortens their TTL, and every reader gets them in one batch as
``RunMark``s, whose ``RunState`` is decided by ``run_state`` alone.
``RedisStartedMarks`` on Redis,
``common.memory.started_marks.MemoryStartedMarks`` in unit tests
(``tests/contracts/started_marks.py`` holds both to the same behaviour).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import redis

from common.clock import CLOCK_SLACK_MS
from common.keys import RedisKeys

SEPARATOR = "\n"


def parse_started(value: bytes | str | None) -> tuple[str | None, str | None]:
    """The owner's worker id and the stored result JSON (None when not known yet)."""
    if value is None:
        return None, None
    text = value.decode() if isinstance(value, bytes) else value
    owner, found, outcome = text.partition(SEPARATOR)
    return owner, (outcome if found else None)


# Owners that are not workers: an execution fenced by the reconciler or an operator is
# being settled without a run; one the leader recalled from a worker's queue waits in
# Kairos for a slot (``services/dispatcher/upkeep/recall.py``), and the fence is lifted
# just before it is sent again. A worker that finds one of these drops its copy.
RECONCILER = "reconciler"
OPERATOR = "operator"
RECALLED = "recalled"
FENCES = frozenset({RECONCILER, OPERATOR, RECALLED})


class RunState(StrEnum):
    """What an execution's started key says of its run (``kairos executions stuck``
    prints the values)."""

    NEVER_STARTED = "never_started"
    RUNNING = "running"
    ENDED_UNRECORDED = "ended_unrecorded"
    SETTLING = "settling"


def run_state(owner: str | None, outcome: str | None) -> RunState:
    """The one rule reading a started key: no owner, a stored outcome, a fence (the
    reconciler or an operator settles it without a run), or a worker's run going on."""
    if owner is None:
        return RunState.NEVER_STARTED
    if outcome is not None:
        return RunState.ENDED_UNRECORDED
    if owner in FENCES:
        return RunState.SETTLING
    return RunState.RUNNING


@dataclass(frozen=True)
class RunMark:
    """What one execution's started key says: who took the run (None: nobody), the
    result JSON stored when it ended, and how long the key has left to live (ms; None
    when it has no expiry or was read without it)."""

    owner: str | None = None
    outcome: str | None = None
    left_ms: int | None = None

    @classmethod
    def parse(cls, value: bytes | str | None, left_ms: int | None = None) -> RunMark:
        """The mark a key's value (and its PTTL, negative: none) says."""
        owner, outcome = parse_started(value)
        return cls(owner, outcome, left_ms if left_ms is not None and left_ms >= 0 else None)

    @property
    def state(self) -> RunState:
        """See ``run_state``."""
        return run_state(self.owner, self.outcome)


def key_may_be_lost(dispatched_at: int | None, epoch_ms: int) -> bool:
    """Whether an execution dispatched at ``dispatched_at`` may have had a started key
    that Redis lost: it was dispatched before the epoch (within the clocks' slack)."""
    return dispatched_at is None or dispatched_at < epoch_ms + CLOCK_SLACK_MS


@dataclass(frozen=True)
class Taken:
    """What a worker taking a batch of started keys found: for each execution, None
    when the key is this worker's now, else the mark already there; and the epoch."""

    marks: list[RunMark | None]
    epoch_ms: int


class StartedMarks(Protocol):
    """The owner of the started keys and the started epoch."""

    def read_runs(self, execution_ids: Sequence[str], *, with_ttl: bool = False) -> list[RunMark]:
        """The mark of each execution, in order, in one round trip; ``with_ttl`` reads
        how long each key has left as well."""
        ...

    def epoch(self, now_ms: int) -> int:
        """The started epoch, set to ``now_ms`` when there is none (the keys were lost)."""
        ...

    def fence(self, execution_ids: Sequence[str], owner: str, ttl_seconds: int) -> list[bool]:
        """Take each free key for ``owner`` (one of ``FENCES``) for ``ttl_seconds``, so
        that no worker starts the run; whether each was taken."""
        ...

    def shorten(self, execution_ids: Sequence[str], ttl_seconds: int) -> None:
        """Give each key that exists ``ttl_seconds`` to live from now (its outcome is
        recorded); a key that is gone stays gone."""
        ...

    def take_runs(
        self, execution_ids: Sequence[str], worker_id: str, ttl_seconds: int, now_ms: int
    ) -> Taken:
        """A worker admitting runs: each free key set (NX) to ``worker_id`` for
        ``ttl_seconds``, the epoch set to ``now_ms`` when missing; in one round trip."""
        ...

    def release_runs(self, execution_ids: Sequence[str], worker_id: str) -> int:
        """Delete the keys ``worker_id`` still holds (runs it admitted and never
        started, or, with ``RECALLED``, recalled runs about to be sent again); how many
        it deleted."""
        ...

    def store_outcomes(self, worker_id: str, outcomes: Sequence[tuple[str, str]]) -> None:
        """Append each (execution id, result JSON) to its key, where ``worker_id`` still
        holds it without one; the key keeps its TTL."""
        ...


# Sets each key but the last to the worker (ARGV[1]) unless it is set; returns "" for
# a key taken now, else the owner already there. One script call instead of a command
# per message: redis-py packs and parses every pipelined command in Python, a large
# share of a worker's CPU. The last key is the started epoch, set to ARGV[3] when Redis
# has none, and returned last.
_TAKE_SCRIPT = """
redis.call('SET', KEYS[#KEYS], ARGV[3], 'NX')
local owners = {}
for i = 1, #KEYS - 1 do
  local key = KEYS[i]
  if redis.call('SET', key, ARGV[1], 'NX', 'EX', ARGV[2]) then
    owners[i] = ''
  else
    owners[i] = redis.call('GET', key) or ''
  end
end
owners[#KEYS] = redis.call('GET', KEYS[#KEYS])
return owners
"""


# Deletes each key still owned by the worker (ARGV[1]); returns how many it deleted.
_RELEASE_SCRIPT = """
local released = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    released = released + redis.call('DEL', key)
  end
end
return released
"""


# Appends each run's result to its key, for keys the worker (ARGV[1]) still holds
# without one; ARGV[i + 1] is the result of KEYS[i].
_REMEMBER_SCRIPT = """
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('SET', key, ARGV[1] .. '\\n' .. ARGV[i + 1], 'KEEPTTL')
  end
end
return 0
"""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisStartedMarks:
    """``StartedMarks`` on Redis: the one place that reads or writes started keys."""

    __slots__ = ("_client", "_keys", "_release", "_remember", "_take")

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self._client = client
        self._keys = keys
        self._take = client.register_script(_TAKE_SCRIPT)
        self._release = client.register_script(_RELEASE_SCRIPT)
        self._remember = client.register_script(_REMEMBER_SCRIPT)

    def read_runs(self, execution_ids: Sequence[str], *, with_ttl: bool = False) -> list[RunMark]:
        """One MGET; with ``with_ttl``, a GET and a PTTL of each key in one transaction."""
        if not execution_ids:
            return []
        keys = [self._keys.execution_started(e) for e in execution_ids]
        if not with_ttl:
            return [RunMark.parse(value) for value in self._client.mget(keys)]
        pipe = self._client.pipeline()
        for key in keys:
            pipe.get(key)
            pipe.pttl(key)
        replies = pipe.execute()
        return [
            RunMark.parse(value, int(left))
            for value, left in zip(replies[::2], replies[1::2], strict=True)
        ]

    def epoch(self, now_ms: int) -> int:
        """A SET NX and a GET of the epoch, in one transaction."""
        pipe = self._client.pipeline()
        pipe.set(self._keys.started_epoch, now_ms, nx=True)
        pipe.get(self._keys.started_epoch)
        return int(pipe.execute()[1])

    def fence(self, execution_ids: Sequence[str], owner: str, ttl_seconds: int) -> list[bool]:
        """A SET NX EX of each key, pipelined."""
        if not execution_ids:
            return []
        pipe = self._client.pipeline(transaction=False)
        for execution_id in execution_ids:
            pipe.set(self._keys.execution_started(execution_id), owner, nx=True, ex=ttl_seconds)
        return [bool(taken) for taken in pipe.execute()]

    def shorten(self, execution_ids: Sequence[str], ttl_seconds: int) -> None:
        """An EXPIRE of each key, pipelined."""
        pipe = self._client.pipeline(transaction=False)
        for execution_id in execution_ids:
            pipe.expire(self._keys.execution_started(execution_id), ttl_seconds)
        pipe.execute()

    def take_runs(
        self, execution_ids: Sequence[str], worker_id: str, ttl_seconds: int, now_ms: int
    ) -> Taken:
        """One call of the take script."""
        keys = [self._keys.execution_started(e) for e in execution_ids]
        keys.append(self._keys.started_epoch)
        *owners, epoch = self._take(keys=keys, args=[worker_id, ttl_seconds, now_ms])
        return Taken([RunMark.parse(_text(o)) if o else None for o in owners], int(epoch))

    def release_runs(self, execution_ids: Sequence[str], worker_id: str) -> int:
        """One call of the release script."""
        keys = [self._keys.execution_started(e) for e in execution_ids]
        return int(self._release(keys=keys, args=[worker_id]))

    def store_outcomes(self, worker_id: str, outcomes: Sequence[tuple[str, str]]) -> None:
        """One call of the remember script."""
        keys = [self._keys.execution_started(e) for e, _ in outcomes]
        self._remember(keys=keys, args=[worker_id, *(json for _, json in outcomes)])
