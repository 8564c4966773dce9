"""What each notifier reports of its receiving hosts and apps: attempts going, callbacks
waiting, each host's recent latency and adaptive limit.

Each notifier writes its own report to Redis every few seconds, with an expiry
(``publish_standing``); ``kairos callbacks hosts`` and the console read every live one
and add them up (``read_standings``, ``merged_hosts``). Losing Redis loses only this
view: the line it describes lives in the notifier.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import redis

from common.keys import RedisKeys

log = logging.getLogger(__name__)

# A report lives this long unless renewed: a notifier gone stops showing within it.
STANDING_TTL_SECONDS = 15
# Hosts and apps one report names at most (those with most waiting, then going).
REPORTED = 50


@dataclass(frozen=True)
class HostStanding:
    """One receiving host (registrable domain or address, with the port)."""

    host: str
    in_flight: int
    waiting: int
    limit: int
    latency_ms: int | None
    attempts: int
    failures: int
    notifiers: int = 1


@dataclass(frozen=True)
class AppStanding:
    """One app's callbacks in a notifier."""

    app_pk: int
    in_flight: int
    waiting: int


@dataclass(frozen=True)
class NotifierStanding:
    """One notifier's report, at ``at_ms`` (cluster clock)."""

    notifier_id: str
    at_ms: int
    hosts: list[HostStanding]
    apps: list[AppStanding]

    def to_json(self) -> str:
        """The report as stored."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> NotifierStanding:
        """A stored report; raises ``ValueError`` or ``KeyError`` when unreadable."""
        raw = json.loads(text)
        return cls(
            str(raw["notifier_id"]),
            int(raw["at_ms"]),
            [HostStanding(**h) for h in raw["hosts"]],
            [AppStanding(**a) for a in raw["apps"]],
        )


def busiest(items: Sequence[HostStanding], count: int) -> list[HostStanding]:
    """The ``count`` hosts with most waiting, then most going."""
    return sorted(items, key=lambda h: (-h.waiting, -h.in_flight, h.host))[:count]


def publish_standing(client: redis.Redis, keys: RedisKeys, standing: NotifierStanding) -> None:
    """Store one notifier's report until it is renewed or expires; a Redis error is
    logged and the report skipped (the next one comes seconds later)."""
    try:
        client.set(
            keys.notifier_standing(standing.notifier_id),
            standing.to_json(),
            ex=STANDING_TTL_SECONDS,
        )
    except redis.RedisError as e:
        log.warning("could not report the notifier's standing (%s)", type(e).__name__)


def withdraw_standing(client: redis.Redis, keys: RedisKeys, notifier_id: str) -> None:
    """Remove a stopping notifier's report."""
    try:
        client.delete(keys.notifier_standing(notifier_id))
    except redis.RedisError:
        pass  # it expires on its own


def read_standings(client: redis.Redis, keys: RedisKeys) -> list[NotifierStanding]:
    """Every live notifier's report; unreadable ones are skipped."""
    found: list[NotifierStanding] = []
    for key in client.scan_iter(match=keys.notifier_standings, count=100):
        text = client.get(key)
        if text is None:
            continue
        try:
            found.append(NotifierStanding.from_json(text))
        except (ValueError, KeyError, TypeError):
            log.warning("skipping an unreadable notifier standing at %r", key)
    return sorted(found, key=lambda s: s.notifier_id)


def merged_hosts(standings: Iterable[NotifierStanding]) -> list[HostStanding]:
    """Each host across notifiers: attempts, waiting and limits added up, latency the
    attempts' weighted mean; busiest first."""
    by_host: dict[str, list[HostStanding]] = {}
    for standing in standings:
        for host in standing.hosts:
            by_host.setdefault(host.host, []).append(host)
    return busiest([_merge(name, parts) for name, parts in by_host.items()], len(by_host))


def _merge(name: str, parts: list[HostStanding]) -> HostStanding:
    timed = [(p.latency_ms, max(1, p.attempts)) for p in parts if p.latency_ms is not None]
    weight = sum(w for _, w in timed)
    latency = round(sum(ms * w for ms, w in timed) / weight) if timed else None
    return HostStanding(
        name,
        sum(p.in_flight for p in parts),
        sum(p.waiting for p in parts),
        sum(p.limit for p in parts),
        latency,
        sum(p.attempts for p in parts),
        sum(p.failures for p in parts),
        len(parts),
    )


def merged_apps(standings: Iterable[NotifierStanding]) -> list[AppStanding]:
    """Each app across notifiers, most waiting first."""
    going: dict[int, list[int]] = {}
    for standing in standings:
        for app in standing.apps:
            sums = going.setdefault(app.app_pk, [0, 0])
            sums[0] += app.in_flight
            sums[1] += app.waiting
    apps = [AppStanding(pk, sums[0], sums[1]) for pk, sums in going.items()]
    return sorted(apps, key=lambda a: (-a.waiting, -a.in_flight, a.app_pk))
