"""The notifier's report of its receiving hosts and apps: to Redis for ``kairos callbacks
hosts`` and the console (``common.notifier_standing``), and as metrics with bounded
labels (the busiest ten by name, the rest added up as "other")."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Protocol

import redis
from prometheus_client import Gauge

from common.keys import RedisKeys
from common.metrics import (
    CALLBACK_APP_WAITING,
    CALLBACK_HOST_IN_FLIGHT,
    CALLBACK_HOST_LIMIT,
    CALLBACK_HOST_WAITING,
)
from common.notifier_standing import (
    REPORTED,
    AppStanding,
    HostStanding,
    NotifierStanding,
    busiest,
    publish_standing,
    withdraw_standing,
)
from services.notifier.scheduler import AttemptScheduler

REPORT_SECONDS = 2.0
# Hosts and apps named in the metrics; the rest are one "other" series.
LABELLED = 10
OTHER = "other"


class WaitingCounts(Protocol):
    """A line's callbacks waiting for their attempts, by app and by host."""

    def waiting_by_app(self) -> dict[int, int]:
        """Callbacks waiting, by app."""

    def waiting_by_host(self) -> dict[str, int]:
        """Callbacks waiting, by host."""


def notifier_id() -> str:
    """This notifier process's id in its reports: host name and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


def host_standings(scheduler: AttemptScheduler, line: WaitingCounts) -> list[HostStanding]:
    """Every host with attempts going, callbacks waiting, or a limit below its ceiling."""
    waiting = line.waiting_by_host()
    return [
        HostStanding(
            v.host,
            v.in_flight,
            waiting.get(v.host, 0),
            v.limit,
            v.latency_ms,
            v.attempts,
            v.failures,
        )
        for v in scheduler.hosts(set(waiting))
    ]


def app_standings(scheduler: AttemptScheduler, line: WaitingCounts) -> list[AppStanding]:
    """Every app with attempts going or callbacks waiting."""
    going, waiting = scheduler.apps_in_flight(), line.waiting_by_app()
    apps = [AppStanding(pk, going.get(pk, 0), waiting.get(pk, 0)) for pk in going | waiting]
    return sorted(apps, key=lambda a: (-a.waiting, -a.in_flight, a.app_pk))


def _set_labelled(gauge: Gauge, label: str, values: list[tuple[str, int]]) -> None:
    """The first ``LABELLED`` values under their own label, the rest summed as "other"."""
    gauge.clear()
    for name, value in values[:LABELLED]:
        gauge.labels(**{label: name}).set(value)
    rest = values[LABELLED:]
    if rest:
        gauge.labels(**{label: OTHER}).set(sum(v for _, v in rest))


def export_metrics(hosts: list[HostStanding], apps: list[AppStanding]) -> None:
    """The busiest hosts and apps as gauges."""
    top = busiest(hosts, len(hosts))
    _set_labelled(CALLBACK_HOST_WAITING, "host", [(h.host, h.waiting) for h in top])
    _set_labelled(CALLBACK_HOST_IN_FLIGHT, "host", [(h.host, h.in_flight) for h in top])
    CALLBACK_HOST_LIMIT.clear()
    for h in top[:LABELLED]:
        CALLBACK_HOST_LIMIT.labels(host=h.host).set(h.limit)
    _set_labelled(CALLBACK_APP_WAITING, "app", [(str(a.app_pk), a.waiting) for a in apps])


class StandingReporter:
    """Reports every ``REPORT_SECONDS`` when ``maybe_report`` is called (from the
    consumer's connection thread; the line's counts are read under its lock). The report
    is written to Redis in a thread of its own: a Redis that does not answer never holds
    up callbacks."""

    def __init__(
        self,
        client: redis.Redis,
        keys: RedisKeys,
        now_ms: Callable[[], int],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._keys = keys
        self._now_ms = now_ms
        self._clock = clock
        self._id = notifier_id()
        self._last = float("-inf")
        self._latest: tuple[list[HostStanding], list[AppStanding]] | None = None
        self._ready = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._write_reports, name="standing", daemon=True)
        self._thread.start()

    def maybe_report(self, scheduler: AttemptScheduler, line: WaitingCounts) -> None:
        """Report now if the last report is ``REPORT_SECONDS`` old."""
        if self._clock() - self._last < REPORT_SECONDS:
            return
        self._last = self._clock()
        hosts, apps = host_standings(scheduler, line), app_standings(scheduler, line)
        export_metrics(hosts, apps)
        with self._ready:
            self._latest = (busiest(hosts, REPORTED), apps[:REPORTED])
            self._ready.notify()

    def _write_reports(self) -> None:
        while True:
            with self._ready:
                while self._latest is None and not self._stopped:
                    self._ready.wait()
                if self._stopped:
                    return
                assert self._latest is not None
                (hosts, apps), self._latest = self._latest, None
            try:
                at_ms = self._now_ms()
            except redis.RedisError:
                continue
            publish_standing(
                self._client, self._keys, NotifierStanding(self._id, at_ms, hosts, apps)
            )

    def close(self) -> None:
        """This notifier stops: no more reports, and its last one goes."""
        with self._ready:
            self._stopped = True
            self._ready.notify()
        self._thread.join(timeout=5)
        withdraw_standing(self._client, self._keys, self._id)
