"""Sharing the notifier's attempts between apps and between receiving hosts, so one
app's receivers, or one slow host, never take them all.

A receiver that hangs holds an attempt for the whole request timeout. Without a share,
an app whose receiver hangs, with enough callbacks queued, would hold every attempt the
notifier runs at once, and every other app's callbacks would wait behind it. Apps are
not enough: many apps may post to one host (a shared integration platform), and one app
may post to many hosts of which one hangs. So a host has a share of its own too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from urllib.parse import urlsplit


class AppShares:
    """Attempts in flight, per app (or any key: a host), out of ``slots`` (the
    notifier's concurrency).

    An app may have ``share`` attempts in flight at once, and more only while ``share``
    slots stay free for the others: an app alone may use most of the notifier, and one
    whose receivers hang holds at most ``slots - share`` attempts. Not thread-safe by
    itself: ``DeliveryShares`` holds the lock.
    """

    def __init__(self, slots: int, share: int) -> None:
        self._slots = slots
        self._share = max(1, share)
        self._by_app: dict[Hashable, int] = {}
        self._total = 0

    def allows(self, app_id: Hashable) -> bool:
        """Whether one more attempt of the app fits now."""
        held = self._by_app.get(app_id, 0)
        return held < self._share or self._slots - (self._total + 1) >= self._share

    def take(self, app_id: Hashable) -> bool:
        """Count one more attempt of the app; False if it must wait for its turn."""
        if not self.allows(app_id):
            return False
        self._by_app[app_id] = self._by_app.get(app_id, 0) + 1
        self._total += 1
        return True

    def give_back(self, app_id: Hashable) -> None:
        """The app's attempt ended."""
        held = self._by_app.get(app_id, 0) - 1
        if held > 0:
            self._by_app[app_id] = held
        else:
            self._by_app.pop(app_id, None)
        self._total -= 1


def default_share(slots: int) -> int:
    """An app's share of ``slots`` attempts when no setting gives one: a quarter."""
    return max(1, slots // 4)


def receiving_host(url: str) -> str:
    """The host (and port) a callback URL posts to, as shares count it."""
    try:
        parts = urlsplit(url)
        return f"{(parts.hostname or '').lower()}:{parts.port or parts.scheme}"
    except ValueError:
        return url


class DeliveryShares:
    """An attempt takes a slot of its app's share and of its receiving host's share,
    both or neither.

    A callback over a share waits up to ``wait_seconds`` for an attempt of its app and
    host to end before it is deferred: under a burst of one app's callbacks, attempts
    end every few milliseconds, and a callback deferred at once would go round the
    first retry tier (seconds) many times over. A receiver that hangs ends no attempt,
    so its excess is deferred after the wait, and other apps' callbacks find the slots
    kept for them.
    """

    def __init__(self, apps: AppShares, hosts: AppShares, wait_seconds: float = 0.0) -> None:
        self._apps = apps
        self._hosts = hosts
        self._wait = wait_seconds
        self._changed = threading.Condition()

    def take(self, app_id: int, url: str) -> bool:
        """Count one more attempt of the app to the URL's host; False if it must wait
        longer than ``wait_seconds``."""
        host = receiving_host(url)
        deadline = time.monotonic() + self._wait
        with self._changed:
            while not (self._apps.allows(app_id) and self._hosts.allows(host)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            self._apps.take(app_id)
            self._hosts.take(host)
            return True

    def give_back(self, app_id: int, url: str) -> None:
        """The attempt ended."""
        with self._changed:
            self._apps.give_back(app_id)
            self._hosts.give_back(receiving_host(url))
            self._changed.notify_all()
